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
their scratch. The same plans run small-window stride-1 convolutions as direct
convolutions (:mod:`.direct`).
"""

from __future__ import annotations

import os

import numpy as np

from ember.backend.flex import blas as blas_mod
from ember.backend.fusion.graph import Graph
from ember.backend.kernel.llvm import jit, small_gemm
from ember.backend.kernel.llvm.gemm import Blocking, blocking

#: Environment variable: ``auto`` (default), ``blas`` or ``ember``.
GEMM_ENV = "EMBER_GEMM"
#: OpenBLAS kernel sets that use 512-bit vectors.
WIDE_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


def own_sgemm(graph: Graph | None = None) -> Blocking | None:
    """The blocking of ember's float32 product where the plan of ``graph`` runs it
    (see the module docstring), else ``None``."""
    choice = os.environ.get(GEMM_ENV, "auto").strip().lower() or "auto"
    if choice not in ("auto", "blas", "ember"):
        from ember.errors import ConfigError

        raise ConfigError(f"ember: {GEMM_ENV}={choice!r} is not one of auto, blas, ember; unset it for auto")
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


def computes_gradients(graph: Graph) -> bool:
    """Whether ``graph`` holds a backward op (a training step: ``auto`` keeps BLAS there)."""
    return any(node.op.endswith(("_backward", "_grad")) for node in graph.nodes)


def host_blocking() -> Blocking:
    """The blocking of the host's vector width (the one every plan of the process uses)."""
    return blocking(jit.vector_width())


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


__all__ = ["GEMM_ENV", "WIDE_CORES", "computes_gradients", "host_blocking", "inline_form", "own_sgemm"]
