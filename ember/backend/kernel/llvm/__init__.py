"""The LLVM layer: kernel IR as LLVM IR through llvmlite, compiled for the host CPU.

It sits below the backends, so fusion's plans and the backends' own compiled kernels
can share it:

* :mod:`.jit`: the host target, the optimisation pipeline and MCJIT;
* :mod:`.mathlib`: numpy's semantics as IR (the transcendentals, NaN rules, casts);
* :mod:`.ops`: the per-op table of elementwise ops over :mod:`.mathlib`;
* :mod:`.loops`: a :class:`~ember.backend.kernel.steps.Kernel` as loop nests
  (reductions in registers or scratch rows);
* :mod:`.arrays`: passing numpy arrays to compiled code cheaply.
"""
