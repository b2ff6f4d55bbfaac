"""Matrix multiply: ``a @ b`` over broadcast batch dims, with an optional epilogue
(``linear``'s bias, an activation, a residual: any kernel-IR :class:`~ember.backend.kernel.exprs.Expr`
applied to each output element before it is stored).

Two templates, chosen by shape and adapter in :func:`choose` (its docstring gives the
measurements behind each threshold):

* :mod:`.gemm_tiled`: shared-memory tiles, ``8x4`` outputs per invocation on a
  ``128x64`` tile for large shapes, ``4x4`` on ``64x64`` for medium ones;
* :mod:`.gemm_small`: a barrier-free register-blocked kernel when M, K or N is small
  (the im2col GEMMs of a small CNN, a 10-class output layer), and for every shape on a
  CPU adapter (lavapipe), where it measured fastest.

Each template has a vectorised variant per operand (``array<vec4<f32>>`` bindings, read
along the contiguous dim) chosen from the strides (:func:`.gemm_common.operand_mode`),
and vec4 stores when N is a multiple of 4. Operands are read through their strides, so
a transposed or broadcast operand needs no copy. int64 has its own one-output-per-
invocation kernel (WGSL has no ``vec4`` of two-word integers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ember.backend.cube import ir, wgsl
from ember.backend.cube.buffer import CubeTensor, broadcast_strides, coalesce
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage, scalar_words
from ember.backend.cube.kernels import gemm_common as gc
from ember.backend.cube.kernels import gemm_small, gemm_tiled
from ember.backend.ops import BinaryOp
from ember.errors import DTypeError, ShapeError

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

_MR = wgsl.MAX_RANK

LARGE = gemm_tiled.Tiling(128, 64, 16, 8)
MEDIUM = gemm_tiled.Tiling(64, 64, 16, 4)


@dataclass(frozen=True)
class Epilogue:
    """``expr`` over the product (``load(0)``), ``operands`` (``load(1)``, ... each
    broadcastable to the output's shape) and ``scalars`` (``scalar(0)``, ...).
    ``outputs``: further results of the output's shape, each an expression over the
    same leaves and its storage (:func:`matmul_many` returns them after the product's)."""

    expr: ir.Expr
    operands: tuple[CubeTensor, ...] = ()
    scalars: tuple[int | float | bool, ...] = ()
    scalar_types: tuple[str, ...] = ()
    outputs: tuple[tuple[ir.Expr, Storage], ...] = ()


def bias_epilogue(bias: CubeTensor, ctype: str, activation: str | None = None) -> Epilogue:
    """``product + bias`` (bias along the last dim), then ``activation`` (a unary op name
    of :data:`wgsl.UNARY`, e.g. ``"relu"``) if given."""
    expr = ir.binary(BinaryOp.ADD, ir.load(0, ctype), ir.load(1, bias.storage.compute))
    if activation is not None:
        expr = ir.unary(activation, expr)
    return Epilogue(expr, (bias,))


def choose(m: int, n: int, k: int, batch: int, cpu: bool = False) -> gemm_tiled.Tiling | gemm_small.Blocking:
    """The template and tile for a problem of this shape on a GPU (``cpu=False``) or a
    CPU adapter such as lavapipe (``cpu=True``).

    Measured on lavapipe (benchmarks/gpu.py and alternating-round runs of each template
    forced on each shape, medians of 3-5 rounds on a loaded 2-core machine, +-20% noise):
    the register-blocked kernel (8x4 per invocation) beat the best shared-memory tile on
    every shape tried: by 1.3x on 1024^3, 1.5x on 512^3, 1.4-1.6x on the W2 shapes
    (128x784x256 and its two backward products), 4-10x on 16x9x784 and 32x144x196 (the
    CNN's im2col GEMMs, where a 64-row tile is three-quarters idle) and 128x256x10.
    lavapipe runs a workgroup's invocations as SIMD lanes on one core, each barrier
    splits the shader into resumable pieces, and the CPU caches serve the repeated
    global reads that shared memory saves on a GPU: so on a CPU adapter it is always
    the register kernel. Among the tiles, 128x64 with 8x4 per invocation beat 64x64
    with 4x4 by 1.2-1.4x on 512^3 and on all three W2 shapes, and a 16-deep slice beat
    8- and 32-deep ones by about 10%.

    On a GPU, shared-memory tiles are what keep the arithmetic units fed, so the
    register kernel is kept for the shapes a tile wastes: K <= 32 (staging a slice costs
    more than the products it feeds), M <= 32 (a 64-row tile at least half idle) and
    N <= 16. The tile sizes then follow occupancy: 128x64 when that still makes >= 32
    workgroups (a GPU has tens of compute units), else 64x64 when that makes >= 16,
    else the register kernel, whose 64-invocation workgroups spread a small problem
    widest. These GPU thresholds were not measured in this change (no GPU was lent):
    ``scripts/gpu_check.sh`` runs each template forced on each shape to check them.
    """
    if cpu or k <= 32 or m <= 32 or n <= 16:
        return registers(m, n)
    if ceil_div(m, LARGE.bm) * ceil_div(n, LARGE.bn) * batch >= 32:
        return LARGE
    if ceil_div(m, MEDIUM.bm) * ceil_div(n, MEDIUM.bn) * batch >= 16:
        return MEDIUM
    return registers(m, n)


def registers(m: int, n: int) -> gemm_small.Blocking:
    """The register-blocked kernel's blocking: 8 rows per invocation (4 when M < 64:
    fewer wasted rows on a 16- or 32-row problem), and as many column quads per
    workgroup as N has, up to all 64 invocations (N = 10 gets 4 quads by 16 row blocks)."""
    quads = ceil_div(n, 4)
    wx = 1
    while wx < quads and wx < gemm_small.WORKGROUP:
        wx *= 2
    return gemm_small.Blocking(8 if m >= 64 else 4, wx)


def matmul(
    backend: KernelContext,
    a: CubeTensor,
    b: CubeTensor,
    bias: CubeTensor | None = None,
    epilogue: Epilogue | None = None,
    out_storage: Storage | None = None,
    plan: gemm_tiled.Tiling | gemm_small.Blocking | None = None,
) -> CubeTensor:
    """``a @ b`` (+ ``bias`` along the last dim, or through ``epilogue``) for rank >= 2
    operands; the result has ``out_storage`` (default: ``a``'s). ``plan`` forces a
    template (tests and benchmarks); by default :func:`choose` picks one."""
    return matmul_many(backend, a, b, bias, epilogue, out_storage, plan)[0]


def matmul_many(
    backend: KernelContext,
    a: CubeTensor,
    b: CubeTensor,
    bias: CubeTensor | None = None,
    epilogue: Epilogue | None = None,
    out_storage: Storage | None = None,
    plan: gemm_tiled.Tiling | gemm_small.Blocking | None = None,
) -> list[CubeTensor]:
    """:func:`matmul`, with the epilogue's further outputs after the product's."""
    if a.storage.compute == "bool":
        raise DTypeError("ember: matmul: not defined on bool tensors; cast to float first")
    if bias is not None:
        if epilogue is not None:
            raise ValueError("ember: cube: matmul takes a bias or an epilogue, not both (put the bias in the epilogue)")
        epilogue = bias_epilogue(bias, a.storage.compute)
    out_storage = out_storage or a.storage
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch_shape = tuple(int(d) for d in _broadcast(a.shape[:-2], b.shape[:-2]))
    out_shape = batch_shape + (m, n)
    out = backend.empty(out_shape, out_storage)
    more = [backend.empty(out_shape, st) for _, st in (epilogue.outputs if epilogue is not None else ())]
    if more and a.storage.compute == "i64":
        raise DTypeError("ember: cube: int64 matmuls take one output")
    count = 1
    for d in batch_shape:
        count *= d
    if count == 0 or m == 0 or n == 0:
        return [out, *more]
    extra = epilogue.operands if epilogue is not None else ()
    for e in extra:
        if not _broadcasts_to(e.shape, out_shape):
            raise ShapeError(
                f"ember: cube: a matmul epilogue operand of shape {list(e.shape)} does not broadcast "
                f"to the output's {list(out_shape)}"
            )
    # Per operand: strides along the output's (batch..., rows, cols), broadcast.
    a_str = broadcast_strides(a.view(a.shape[:-2], a.strides[:-2], 0), batch_shape) if batch_shape else ()
    b_str = broadcast_strides(b.view(b.shape[:-2], b.strides[:-2], 0), batch_shape) if batch_shape else ()
    e_str = [broadcast_strides(e, out_shape) for e in extra]
    cshape, cstrides = (
        coalesce(batch_shape, a_str, b_str, *[s[:-2] for s in e_str]) if batch_shape else ((), [()] * (2 + len(extra)))
    )
    if len(cshape) > _MR:
        raise ShapeError(f"ember: cube: matmul batch shape {list(batch_shape)} has more than {_MR} strided dims")
    # Row / column strides (0 on a dim of size 1: it is never stepped).
    ars, acs = (a.strides[-2] if m > 1 else 0), (a.strides[-1] if k > 1 else 0)
    brs, bcs = (b.strides[-2] if k > 1 else 0), (b.strides[-1] if n > 1 else 0)
    blocks = [(a.offset, ars, acs, cstrides[0]), (b.offset, brs, bcs, cstrides[1])]
    blocks += [(e.offset, s[-2], s[-1], cs) for e, s, cs in zip(extra, e_str, cstrides[2:])]

    ctype = a.storage.compute
    spec = None
    if epilogue is not None:
        spec = gc.EpilogueSpec(
            epilogue.expr, tuple(e.storage for e in extra), tuple(epilogue.scalar_types), tuple(epilogue.outputs)
        )
    if ctype == "i64":
        plan = None
        key: tuple[Any, ...] = ("matmul_i64", a.storage, b.storage, out_storage, spec)
        kernel = backend.cache.get(key, lambda: _source_i64(a.storage, out_storage, spec))
        tiles = (ceil_div(n, _S), ceil_div(m, _S))
    else:
        plan = plan or choose(m, n, k, count, backend.runtime.cpu)
        vec_outer = 4
        a_mode = gc.operand_mode(a.storage, m, k, ars, acs, a.offset, cstrides[0], vec_outer)
        b_mode = gc.operand_mode(b.storage, n, k, bcs, brs, b.offset, cstrides[1], vec_outer)
        out_vec = gc.vectorisable(out_storage) and n % 4 == 0
        key = ("matmul", plan, a.storage, a_mode, b.storage, b_mode, out_storage, out_vec, spec)
        if isinstance(plan, gemm_tiled.Tiling):
            kernel = backend.cache.get(
                key,
                lambda: gemm_tiled.source(
                    plan, a.storage, a_mode, b.storage, b_mode, out_storage, out_vec, ctype, spec
                ),
            )
            tiles = (ceil_div(n, plan.bn), ceil_div(m, plan.bm))
        else:
            kernel = backend.cache.get(
                key,
                lambda: gemm_small.source(
                    plan, a.storage, a_mode, b.storage, b_mode, out_storage, out_vec, ctype, spec
                ),
            )
            tiles = (ceil_div(ceil_div(n, 4), plan.wx), ceil_div(ceil_div(m, plan.tm), plan.wy))
    scalars = []
    if epilogue is not None:
        for v, t in zip(epilogue.scalars, epilogue.scalar_types):
            scalars += list(scalar_words(v, t))
    buffers = [a.buffer, b.buffer] + [e.buffer for e in extra] + [out.buffer] + [x.buffer for x in more]
    launch(backend, kernel, tiles, (m, n, k), cshape, blocks, count, buffers, scalars)
    return [out, *more]


def launch(
    backend: KernelContext,
    kernel,
    tiles: tuple[int, int],
    mnk: tuple[int, int, int],
    batch_shape: tuple[int, ...],
    blocks: list,
    count: int,
    buffers: list,
    tail: list[int],
) -> None:
    """Launch a matmul-template kernel over ``tiles`` (column tiles, row tiles) and
    ``count`` batches, split where a grid dim would pass the adapter's limit.
    ``blocks``: per operand ``(offset, row stride, column stride, batch strides)``;
    ``tail``: the words after them (the epilogue's scalars, then anything else)."""
    rank = len(batch_shape)
    pad = [0] * (_MR - rank)
    head = [*mnk, 0, 0, 0, 0, rank, *batch_shape, *pad]
    info_blocks = []
    for offset, rs, cs, bs in blocks:
        info_blocks += [x & 0xFFFF_FFFF for x in (offset, rs, cs, *bs)] + pad
    limit = backend.runtime.max_groups
    for z0 in range(0, count, limit):
        for y0 in range(0, tiles[1], limit):
            for x0 in range(0, tiles[0], limit):
                head[3:7] = [min(limit, count - z0), z0, x0, y0]
                groups = (min(limit, tiles[0] - x0), min(limit, tiles[1] - y0), head[3])
                backend.runtime.launch3(kernel, buffers, head + info_blocks + list(tail), groups)


_S = 16  # tile edge of the int64 kernel


def _source_i64(st: Storage, out: Storage, spec: gc.EpilogueSpec | None) -> KernelSource:
    """int64 matmul: one invocation per output over ``_S x _S`` tiles, accumulating with
    the 64-bit helpers (WGSL has no ``vec4`` of them for the register templates)."""
    extra = spec.storages if spec is not None else ()
    pa, pb = gc.block_at(0), gc.block_at(1)
    lines = [
        "    let m = info[0]; let n = info[1]; let kdim = info[2];",
        "    if (wg.z >= info[3]) { return; }",
        "    let batch = wg.z + info[4];",
        f"    let r = (wg.y + info[6]) * {_S}u + lid / {_S}u; let c = (wg.x + info[5]) * {_S}u + lid % {_S}u;",
        "    if (r >= m || c >= n) { return; }",
        *gc.batch_offsets(2 + len(extra)),
        *[f"    eo{j} = base{2 + j};" for j in range(len(extra))],
        f"    let ars = bitcast<i32>(info[{pa + 1}u]); let acs = bitcast<i32>(info[{pa + 2}u]);",
        f"    let brs = bitcast<i32>(info[{pb + 1}u]); let bcs = bitcast<i32>(info[{pb + 2}u]);",
        f"    var acc = {wgsl.ZERO['i64']};",
        "    for (var k = 0u; k < kdim; k++) {",
        "        let va = in0[u32(base0 + i32(r) * ars + i32(k) * acs)];",
        "        let vb = in1[u32(base1 + i32(k) * brs + i32(c) * bcs)];",
        "        acc = add_l(acc, mul_l(va, vb));",
        "    }",
        "    out0[(batch * m + r) * n + c] = epi(acc, batch, r, c);",
    ]
    main = (
        f"@compute @workgroup_size({_S * _S})\n"
        "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
        + "\n".join(lines)
        + "\n}\n"
    )
    code = gc.epilogue_function(spec, "i64", out) + "\n" + main
    ins = [st, st, *extra]
    source = "\n".join([wgsl.bindings(ins, [out]), wgsl.helpers_for(code + out.store), code])
    return KernelSource("matmul_i64", source, len(ins), 1)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def ceil_div(x: int, y: int) -> int:
    """``ceil(x / y)`` for positive ints."""
    return -(-x // y)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    import numpy as np

    return tuple(np.broadcast_shapes(a, b))
