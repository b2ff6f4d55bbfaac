"""The CPU lowering of the fusion IR: LLVM IR through llvmlite, BLAS for large matmuls.

``LLVMExecutor`` is the executor ``Device.flex().fusion()`` uses when llvmlite is
installed (see :func:`ember.backend.fusion.executors.default_executor`). The
target-independent analysis it shares with the other lowerings lives in
:mod:`ember.backend.fusion.scheduler` and :mod:`ember.backend.fusion.memory`; the
kernel IR's LLVM printer, JIT and math library live in :mod:`ember.backend.kernel.llvm`
(below the backends, which may use them too); this package holds what is specific to fusion's
plans on the CPU:

* :mod:`.support`: what compiles (ops, dtypes, the BLAS threshold);
* :mod:`.codegen`: a schedule's compiled steps as one module, matmuls as BLAS calls;
* :mod:`.library` and :mod:`.chains`: hand-written loop nests (convolution, pooling,
  gather/scatter) and convolution chains;
* :mod:`ember.backend.flex.blas`: numpy's OpenBLAS and the thread count ember sets;
* :mod:`.executor`: plans and bindings; :mod:`.variant`: a plan's compiled
  expansions; :mod:`.runner`: a variant's generated run function;
  :mod:`.native_calls`: compiled segments called as Python builtins.
"""

from ember.backend.fusion.llvm.executor import LLVMExecutor, LLVMPlan

__all__ = ["LLVMExecutor", "LLVMPlan"]
