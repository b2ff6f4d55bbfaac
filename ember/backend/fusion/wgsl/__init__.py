"""The cube lowering of the fusion IR: fused WGSL kernels on wgpu.

``CubeExecutor`` is the executor ``Device.wgpu().fusion()`` uses (see
:func:`ember.backend.fusion.executors.default_executor`) and the one
``ember.compile`` plans cube steps with. The analysis it shares with the other
lowerings lives in :mod:`ember.backend.fusion.scheduler`; this package holds what is
specific to WGSL and the cube backend:

* :mod:`.support`: what compiles (ops, dtypes, which composites expand);
* :mod:`.launches`: schedule steps as cube launches (fused elementwise kernels with
  several outputs, fused reductions, matmuls with epilogues, eager calls);
* :mod:`.tape`: a plan's launches recorded once and replayed with bind groups built
  once and no Python per launch;
* :mod:`.executor`: plans, their variants and runs.

One expression IR. The scheduler builds :class:`~ember.backend.kernel.exprs.Expr`
trees (numpy dtypes, loads of schedule buffers through strided
:class:`~ember.backend.kernel.views.View` s, run-time scalars by slot); a launch
numbers their leaves (:class:`~ember.backend.cube.ir.Launch`: operand ``j``, scalar
``k``, reduction ``k``) and hands them to the same cube kernels and the same WGSL
printer (:class:`~ember.backend.cube.ir.Emitter`) that cube's eager ops use, which
build their trees of the same IR one op at a time. The printer reads each node's
compute type from its dtype and knows the storage conversions (uint8 in ``i32``
words, masked where a uint8 result is made; float16 rounding on store; bool words).
"""

from ember.backend.fusion.wgsl.executor import CubeExecutor, CubePlan

__all__ = ["CubeExecutor", "CubePlan"]
