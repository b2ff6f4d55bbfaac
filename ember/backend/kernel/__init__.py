"""``kernel``: the kernel IR and the LLVM layer, below the backends.

flex, cube and fusion all import this package (it imports only the backend protocol,
numpy and llvmlite; tests/test_layers.py checks it):

* :mod:`.exprs`: a kernel's per-element expression DAG;
* :mod:`.views`: strided views, the layout ops as index arithmetic;
* :mod:`.steps`: loop nests (:class:`~.steps.Kernel`) and matrix products over buffers,
  and row programs (:class:`~.steps.RowProgram`: sizes as arguments, several passes per
  row; flex's native kernels), whose expressions :mod:`.row_exprs` builds;
* :mod:`.space`: a loop nest's simplified iteration space, which every printer loops over;
* :mod:`.op_table`: the ops each printer compiles and each float function's spelling
  per printer (LLVM, CUDA C, WGSL);
* :mod:`.llvm`: the CPU printer of that IR (LLVM IR through llvmlite), the JIT and the
  math library every compiled CPU kernel uses (fusion's plans, flex's native kernels).

The fusion compiler builds these from its graph (:mod:`ember.backend.fusion.scheduler`);
cube's CUDA C target prints them too (:mod:`ember.backend.cuda.codegen`).
See docs/design.md, "The kernel IR and its printers".
"""
