"""``cube.cuda``: the NVIDIA runtime of the cube backend (Burn's ``burn-cuda``, a CubeCL
runtime). Get a device with ``Device.cuda(index)``; its repr is Burn's,
``Device<Cube(Cuda(CudaDevice { index: 0 }))>``, and ``.autodiff()`` and ``.fusion()``
stack on it as on any device. Install ``pip install -e ".[cuda12]"`` (or
``".[cuda13]"``, matching the driver's CUDA version).

Why here: in Burn, CUDA is a *runtime* of the cube backend next to wgpu (the repr says
``Cube(Cuda(...))``), and docs/design.md's backend layer lists cube as "GPU: wgpu and cuda
runtimes". The package shares no code with the WGSL side (different language, memory
model and launch API); what it shares with the rest of ember is the kernel IR of the
fusion layer (:mod:`ember.backend.kernel.exprs`, ``steps``, ``views``), which
:mod:`.lowering` turns into CUDA C. It imports only from ``ember.backend`` (a backend
layer package) and never touches the GPU at import.

Runtime libraries, and why:

* **NVRTC through NVIDIA's ``cuda-bindings``** compiles the generated CUDA C. It is
  NVIDIA's own, maintained binding; NVRTC is a library that runs without a driver or
  GPU, so CI compiles every kernel for sm_80 and sm_90 (CuPy's compile path needs a
  driver: it asks the device for its architecture). Kernels are cached on disk by
  source and architecture (:mod:`.nvrtc`).
* **CuPy** runs them: its ``MemoryPool`` is a caching allocator with statistics and
  ``free_all_blocks`` (``empty_cache``); it has streams, module loading from cubins
  with fast launches, cuBLAS bindings (``gemmStridedBatchedEx``: float32 without TF32,
  float64, bfloat16/float16 on tensor cores) and CUDA Graph capture
  (``Stream.begin_capture``/``end_capture``). It is maintained and fast, and ships
  wheels per CUDA major version (``cupy-cuda12x``, ``cupy-cuda13x``). ``cuda-core``
  offers similar pieces, but its API is still marked experimental and changes between
  releases; cuda-bindings alone has no cuBLAS, and writing an allocator and graph
  plumbing over raw driver calls would duplicate CuPy's.

Layout of the package:

* ``device``: ``make_cuda_backend`` (the factory ``Device.cuda`` calls).
* ``runtime``: one device's memory pool, stream, loaded kernels, cuBLAS handle,
  out-of-memory errors; ``tensor``: ``CudaTensor``, a strided view (layout ops are free).
* ``dtypes`` + ``prelude`` + ``lowering``: how each dtype is held and computed, the C
  helpers with numpy's semantics, and the CUDA C lowering of IR expressions;
  ``codegen``: one IR kernel (elementwise, or with reductions along one dim) as a
  ``__global__`` function; ``templates``: Philox, scans, sort, gather/scatter, select,
  argwhere, integer matmul; ``blas``: cuBLAS matmuls.
* ``backend``: ``CudaBackend``, every primitive of the protocol; ``executor``: captured
  steps (``ember.compile``) replayed as CUDA Graphs.
* ``catalog``: every kernel the backend emits, generated with no GPU (the compile tests).
"""
