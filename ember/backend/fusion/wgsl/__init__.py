"""The cube lowering of the fusion IR: fused WGSL kernels on wgpu.

``CubeExecutor`` is the executor ``Device.wgpu().fusion()`` uses (see
:func:`ember.backend.fusion.executors.default_executor`) and the one
``ember.compile`` plans cube steps with. The analysis it shares with the other
lowerings lives in :mod:`ember.backend.fusion.scheduler`; this package holds what is
specific to WGSL and the cube backend:

* :mod:`.support`: what compiles (ops, dtypes, which composites expand);
* :mod:`.translate`: fusion expressions as cube expressions;
* :mod:`.launches`: schedule steps as cube launches (fused elementwise kernels with
  several outputs, fused reductions, matmuls with epilogues, eager calls);
* :mod:`.tape`: a plan's launches recorded once and replayed with bind groups built
  once and no Python per launch;
* :mod:`.executor`: plans, their variants and runs.

Two expression IRs, one per level. The fusion :class:`~ember.backend.kernel.exprs.Expr`
is the *kernel IR*: numpy dtypes, loads of schedule buffers through strided
:class:`~ember.backend.kernel.views.View` s, run-time scalars by slot; the
scheduler builds and interns it, and every target (LLVM, WGSL, CUDA C) reads the
same trees. cube's :class:`~ember.backend.cube.ir.Expr` is the *WGSL emitter's
input*: WGSL compute types (``f32``, ``i32``, ``i64`` on two words, ``bool``),
operand indices of one launch, and the storage conversions that only the emitter
knows (uint8 in ``i32`` words, float16 rounding on store, bool words). cube's eager
ops build that second IR directly, one op at a time, with their tensors as the
launch's operands; a fused kernel reaches the same emitter through
:mod:`.translate`, a total function from the first IR to the second. Building the
eager ops' expressions through the fusion IR instead would give every eager op a
scheduler's buffers and views for nothing and still need the second IR for the
emitter: so the split is two levels of one path, not two generators.
"""

from ember.backend.fusion.wgsl.executor import CubeExecutor, CubePlan

__all__ = ["CubeExecutor", "CubePlan"]
