"""The LLVM layer: kernel IR as LLVM IR through llvmlite, compiled for the host CPU.

It sits below the backends: fusion's CPU plans (:mod:`ember.backend.fusion.llvm`) and
flex's native kernels (:mod:`ember.backend.flex.native`) both compile through it:

* :mod:`.jit`: the host target, the optimisation pipeline and MCJIT;
* :mod:`.mathlib`: numpy's semantics as IR (the transcendentals, NaN rules, casts);
* :mod:`.ops`: the LLVM printer of the elementwise ops (the kernel layer's op table,
  :mod:`ember.backend.kernel.op_table`, over :mod:`.mathlib`);
* :mod:`.loops`: a :class:`~ember.backend.kernel.steps.Kernel` as loop nests
  (reductions in registers or scratch rows);
* :mod:`.row_program`: a :class:`~ember.backend.kernel.steps.RowProgram` as a function
  with run-time sizes (flex's native kernels);
* :mod:`.arrays`: passing numpy arrays to compiled code cheaply.
"""
