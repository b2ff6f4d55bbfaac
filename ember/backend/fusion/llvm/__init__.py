"""The CPU lowering of the fusion IR: LLVM IR through llvmlite, BLAS for large matmuls.

``LLVMExecutor`` is the executor ``Device.flex().fusion()`` uses when llvmlite is
installed (see :func:`ember.backend.fusion.executors.default_executor`). The
target-independent analysis it shares with the other lowerings lives in
:mod:`ember.backend.fusion.scheduler` and :mod:`ember.backend.fusion.memory`; this
package holds only what is specific to LLVM and the CPU:

* :mod:`.support`: what compiles (ops, dtypes, the BLAS threshold);
* :mod:`.mathlib` and :mod:`.ops`: numpy's semantics as IR, op by op;
* :mod:`.codegen`: a schedule's compiled steps as one module, matmuls as BLAS calls;
* :mod:`.loops`: kernels as loop nests (reductions in registers or scratch rows);
* :mod:`.jit`: the optimisation pipeline and MCJIT;
* :mod:`.blas`: numpy's OpenBLAS and the thread count ember sets;
* :mod:`.executor`: plans and their runs.
"""

from ember.backend.fusion.llvm.executor import LLVMExecutor, LLVMPlan

__all__ = ["LLVMExecutor", "LLVMPlan"]
