"""Which float32 products a plan runs as ember's own compiled product
(:mod:`ember.backend.kernel.llvm.gemm`) instead of BLAS's ``sgemm``.

``EMBER_GEMM`` decides: ``blas`` (always BLAS), ``ember`` (always ember's product, with
the blocking of the host's vector width), or ``auto`` (the default): ember's product
where the host has 512-bit vectors (AVX-512) and the BLAS runs narrower kernels
(OpenBLAS's ``Haswell``, ``Zen`` or older, as where ``OPENBLAS_CORETYPE=Haswell`` pins
them), since there it is faster. Measured (CPU time, one thread, AVX-512 host, OpenBLAS
pinned to ``Haswell``; ``benchmarks/gemm_floor.py``-style products): 1024^3 182 against
106 GFLOP/s; ResNet-50's convolutions as products, e.g. 64x3136x576 132 against 94,
128x784x1152 159 against 101. Against OpenBLAS's own AVX-512 kernels (``SkylakeX``)
it is about 10-15% slower, so ``auto`` keeps BLAS there. ``auto`` also keeps BLAS in plans that
compute gradients (their graph holds a ``*_backward`` or ``*_grad`` op): an eager step
multiplies with BLAS, and a compiled training step should leave the state an eager one
leaves to rounding over many steps (W4's 100 compiled steps drifted to 2.2e-5 relative
from eager with ember's product, past the 1e-5 its test allows); an inference plan has
no state to leave.

Where it runs: the forward convolutions' products (:mod:`.conv`: ``conv``,
``conv_transpose`` and the convolution chains), which need its packing buffers in
their scratch. Small-window stride-1 convolutions run as direct convolutions
(:mod:`.direct`) where :func:`direct_convolutions` says: on hosts with 512-bit vectors
that includes training plans, whose products otherwise stay on BLAS (the direct kernel
beat OpenBLAS's AVX-512 kernels too, on the small CNN's layers).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ember.backend.flex import blas as blas_mod
from ember.backend.fusion.graph import Graph
from ember.backend.kernel.llvm import direct_batch, jit, small_gemm
from ember.backend.kernel.llvm.builder import KernelBuilder
from ember.backend.kernel.llvm.direct_batch import GEMM_ENV, gemm_setting, module_buffer
from ember.backend.kernel.llvm.gemm import Blocking, blocking
from ember.backend.kernel.llvm.small_gemm import Operand

#: OpenBLAS kernel sets that use 512-bit vectors.
WIDE_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


def own_sgemm(graph: Graph | None = None) -> Blocking | None:
    """The blocking of ember's float32 product where the plan of ``graph`` runs it
    (see the module docstring), else ``None``."""
    choice = gemm_setting()
    if choice == "blas":
        return None
    if choice == "ember":
        return host_blocking()
    if graph is not None and computes_gradients(graph):
        return None
    blas = blas_mod.load()
    if jit.vector_width() != 512 or blas is None or not blas.core or blas.core.lower() in WIDE_CORES:
        return None
    return host_blocking()


def direct_convolutions() -> bool:
    """Whether a plan's small-window stride-1 float32 convolutions (forward, and the
    input gradient as a convolution with the flipped kernel) run the direct kernel
    (:mod:`.direct`), as flex's eager ones do: with ``EMBER_GEMM=ember``; never with
    ``blas``; under ``auto`` where the host has 512-bit vectors, in training plans too
    (:func:`ember.backend.kernel.llvm.direct_batch.enabled`)."""
    return direct_batch.enabled()


def computes_gradients(graph: Graph) -> bool:
    """Whether ``graph`` holds a backward op (a training step: ``auto`` keeps BLAS there)."""
    return any(node.op.endswith(("_backward", "_grad")) for node in graph.nodes)


def host_blocking() -> Blocking:
    """The blocking of the host's vector width (the one every plan of the process uses)."""
    return blocking(jit.vector_width())


#: Under ``auto``, products below this many multiply-adds that the inline loops take
#: (:mod:`~ember.backend.kernel.llvm.small_gemm`) run those loops even in plans that run
#: ember's own product: the function flex's eager product calls for the shape, shared by
#: name (so the plan compiles no product eager compiled). They measured as fast or
#: faster there (CPU time, compiled ``relu(a @ b)``, OpenBLAS pinned to ``Haswell``,
#: 3 alternating rounds, own -> inline): 256x512x64 77 -> 72 us, 1024x128x128 152 ->
#: 153, 1024x512x128 569 -> 567, 128x768x768 699 -> 643; at 2^27 and beyond they were
#: even or behind (256x1024x1024 2.72-2.79 -> 2.82-3.69 ms).
OWN_MIN_WORK = 1 << 27
#: Products below this many multiply-adds that the inline loops do not take stay on
#: BLAS: its set-up is small beside ember's packing there (same measure, own -> BLAS:
#: 256x64x10 7.5-10.9 -> 6.9-7.1 us, 32x64x10 3.2 -> 2.7; 1024x128x65, 8.5M
#: multiply-adds, 119 -> 175 us, keeps the own product).
OWN_MIN_BLAS_WORK = 1 << 20


def own_product_skips(m: int, n: int, k: int, lanes: int) -> bool:
    """Whether a product of a plan that runs ember's own product runs the inline loops
    or BLAS instead (see :data:`OWN_MIN_WORK`, :data:`OWN_MIN_BLAS_WORK`; never under
    ``EMBER_GEMM=ember``)."""
    if gemm_setting() != "auto":
        return False
    work = m * n * k
    inline = m >= small_gemm.ROWS and small_gemm.applies(n, lanes)
    return work < OWN_MIN_BLAS_WORK or (inline and work < OWN_MIN_WORK)


def inline_form(
    eligible: bool,
    dtype: np.dtype,
    la: tuple[bool, int] | None,
    lb: tuple[bool, int] | None,
    m: int,
    n: int,
    k: int,
    lanes: int,
) -> str | None:
    """Where a product that does not run ember's own product runs as
    :mod:`~ember.backend.kernel.llvm.small_gemm`'s inline loops: ``"inline"`` (``A @ B``,
    ``B``'s rows dense), ``"dots"`` (``B`` stored transposed, as ``dY W^T``: dot products
    of dense rows) or ``None`` (BLAS). ``eligible``: the product would call a
    single-threaded BLAS's ``?gemm`` (a multi-threaded one keeps its products: the loops
    run on one core)."""
    if not eligible or dtype != np.dtype(np.float32) or not small_gemm.enabled() or la is None or lb is None:
        return None
    if not lb[0] and m >= small_gemm.ROWS and small_gemm.applies(n, lanes):
        return "inline"
    if (
        not la[0]
        and lb[0]
        and m >= small_gemm.DOT_ROWS
        and n >= small_gemm.DOT_COLS
        and small_gemm.applies_nt(k, lanes)
    ):
        return "dots"
    return None


#: A ``"dots"`` product with at least this many rows (and no batch) packs ``B`` from its
#: transposed storage and runs the plain register tiles (:func:`emit_repacked`).
REPACK_ROWS = 64


def repacks(m: int, n: int, batched: bool, lanes: int) -> bool:
    """Whether a ``"dots"`` product (:func:`inline_form`) runs as :func:`emit_repacked`."""
    return not batched and m >= REPACK_ROWS and small_gemm.applies_packed(n, lanes)


def _size_buffer(kb: KernelBuilder, stem: str, floats: int) -> ir.Value:
    """The first float of the module's buffer of ``floats`` floats named
    ``<stem><floats>``: one per size, shared by the module's steps."""
    return module_buffer(kb.b, kb.b.module, f"{stem}{floats}", floats, reuse=True)


def transposes(m: int, n: int, k: int, batched: bool, lanes: int) -> bool:
    """Whether a ``"dots"`` product (:func:`inline_form`) that does not repack
    (:func:`repacks`) runs as flex's eager product does (:func:`emit_transposed`): ``B``
    copied from its transposed storage and the shared inline product, where eager runs
    that product (:data:`ember.backend.flex.native_gemm.MIN_WORK` multiply-adds or more), so
    the plan calls the function an eager run compiled instead of compiling its own dot
    products (digits' ``dY W^T``, 32x512x64: 25 ms of LLVM time on a cold cache)."""
    from ember.backend.flex.native_gemm import MIN_WORK

    return not batched and m >= small_gemm.ROWS and small_gemm.applies(n, lanes) and m * n * k >= MIN_WORK


def emit_transposed(
    kb: KernelBuilder, prefix: str, m: int, n: int, k: int, a: Operand, b_t: Operand, c: Operand, lanes: int
) -> None:
    """``C = A @ B`` with ``B`` given by ``B^T``'s rows: ``B`` copied into a module buffer
    (one per size, shared by the plan's steps) as dense rows, then the shared inline
    product (:func:`~ember.backend.kernel.llvm.small_gemm.emit_shared_gemm`), which is what
    flex's eager product runs on the transposed copy numpy makes: the two are bit-identical."""
    start = _size_buffer(kb, f"{prefix}_transposed", k * n)
    b = kb.b
    f32 = np.dtype(np.float32)
    i64 = ir.IntType(64)

    def row(p: ir.Value, _: list) -> list:  # B's row p: column p of B^T's rows (dense stores)
        dst = b.mul(p, ir.Constant(i64, n))

        def element(j: ir.Value, _: list) -> list:
            value = kb.load(b_t.ptr, b.add(b.mul(j, ir.Constant(i64, b_t.row)), p), f32)
            kb.store(value, start, b.add(dst, j), f32)
            return []

        kb.loops.run(n, element)
        return []

    kb.loops.run(k, row)
    emitted = small_gemm.emit_shared_gemm(kb, m, n, k, a, Operand(start, n), c, lanes)
    assert emitted, "transposes() checked the product's shape"


def emit_repacked(
    kb: KernelBuilder, prefix: str, m: int, n: int, k: int, a: Operand, b_t: Operand, c: Operand, lanes: int
) -> None:
    """``C = A @ B`` with ``B`` given by ``B^T``'s rows (``dY W^T``): ``B`` packed into a
    module buffer (one per size, shared by the plan's steps), then the register tiles of
    :func:`~ember.backend.kernel.llvm.small_gemm.emit_gemm_packed`, whose outputs each
    sum over ``k`` in order as flex's eager product does. The dot-product form sums
    lane-wise and reduces each output across lanes at the end: [2048, 512] @ [512,
    128]^T 1628 -> 1226 us alone (CPU time, load 6)."""
    start = _size_buffer(kb, f"{prefix}_pack_t", small_gemm.packed_floats(k, n))
    small_gemm.emit_pack(kb, k, n, Operand(b_t.ptr, 1, b_t.row), start, lanes)
    small_gemm.emit_gemm_packed(kb, m, n, k, a, start, c, lanes)


__all__ = [
    "GEMM_ENV",
    "REPACK_ROWS",
    "WIDE_CORES",
    "computes_gradients",
    "emit_repacked",
    "emit_transposed",
    "host_blocking",
    "inline_form",
    "own_sgemm",
    "repacks",
    "transposes",
]
