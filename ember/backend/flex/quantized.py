"""flex's ``quantized_linear``: the compiled kernels of
:mod:`ember.backend.flex.quant_kernels` where the shapes suit them, and a numpy
reference (which does dequantize the weight) elsewhere.

``path`` picks the implementation: ``None`` the fastest available, ``"packed"``,
``"vnni"`` or ``"portable"`` one of the int8 x int8 kernels (``"packed"``: the weight
packed once into VNNI panels, :mod:`ember.backend.flex.quant_packed`, taken by ``None``
from :data:`PACKED_ROWS` rows on; weight-only: ``"portable"`` the kernels of a CPU
without AVX-512, compiled on request), ``"numpy"`` the reference (tests compare them).
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from ember.backend.flex.native import address
from ember.backend.flex.quant_int4_dynamic import CHUNK, scratch_bytes
from ember.backend.flex.quant_kernels import INT8_TILES, WEIGHT_ONLY_TILES, quant_kernels
from ember.backend.flex.quant_packed import PACKED_TILES, pack_int8
from ember.errors import BackendUnavailableError

__all__ = [
    "ACTIVATIONS",
    "activate",
    "dequantize_array",
    "dequantized_tiles",
    "int4_int8_gemm",
    "int8_gemm",
    "quantize_rows_int8",
    "quantized_linear",
]

_F32 = np.dtype(np.float32)
#: From this many rows of ``x`` on (prefill), weight-only products dequantize ``TILE_ROWS``
#: rows of the weight at a time into a cache-sized float tile (1 MiB for 4096 inputs) and
#: call sgemm on it; fewer rows (decode) run the register-tiled kernels.
TILE_GEMM_ROWS = 32
TILE_ROWS = 64
#: From this many rows of ``x`` on, dynamic int8 runs the packed-weight kernel (VNNI):
#: one register tile of rows (fewer rows are padded to it).
PACKED_ROWS = PACKED_TILES[0][0]
#: The packed kernels' block of ``k``: the whole row up to this many values.
PACKED_KC = 4096
#: Packed weights, keyed by ``id`` of the int8 values they were packed from (dropped
#: with that array).
_PACKED: dict[Any, tuple[Any, np.ndarray]] = {}


def quantized_linear(
    x: np.ndarray,
    values: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    bias: np.ndarray | None,
    input_scale: np.ndarray | None,
    value: str,
    group: int,
    activations: str,
    path: str | None = None,
    activation: str = "",
) -> np.ndarray:
    """``x [..., K] @ dequantize(w).T + bias`` with ``w`` stored ``[N, K]`` (packed), then
    ``activation`` (``""`` or ``"relu"``, see :func:`activate`)."""
    lead = x.shape[:-1]
    k = x.shape[-1]
    n = values.shape[0]
    rows = np.ascontiguousarray(x.reshape(-1, k), dtype=_F32)
    if scales.shape[0] != n:  # one scale per tensor: one per row for the kernels
        scales = np.broadcast_to(scales, (n, scales.shape[1]))
        zero_points = None if zero_points is None else np.broadcast_to(zero_points, (n, zero_points.shape[1]))
    if activations and value == "int4":
        out = activate(int4_int8_gemm(rows, values, scales, zero_points, bias, input_scale, group, path), activation)
    elif activations:
        out = activate(int8_gemm(rows, values, scales, bias, input_scale, path), activation)
    else:
        out = _weight_only(rows, values, scales, zero_points, bias, value, group, path, activation)
    return out.reshape(lead + (n,))


#: The activations flex's quantized kernels apply to their output (an epilogue that a
#: compiled plan folds into the call, :mod:`ember.backend.fusion.quant_epilogue`).
ACTIVATIONS = ("", "relu")


def activate(y: np.ndarray, activation: str) -> np.ndarray:
    """``y`` with ``activation`` applied in place: ``"relu"`` is ``max(y, 0)`` (NaN stays
    NaN), ``""`` nothing."""
    if activation == "relu":
        np.maximum(y, np.float32(0.0), out=y)
    elif activation:
        raise ValueError(f"ember: quantized kernels: unknown activation {activation!r}; one of {ACTIVATIONS}")
    return y


def quantize_rows_int8(rows: np.ndarray, input_scale: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Each row of ``rows`` as int8 with scale ``max|row| / 127`` (or the static scale)."""
    if input_scale is None:
        scale = np.abs(rows).max(axis=1) / np.float32(127.0)
        scale = np.maximum(scale, np.float32(1e-30)).astype(_F32)
    else:
        scale = np.full(rows.shape[0], input_scale.reshape(-1)[0], dtype=_F32)
    q = np.clip(np.rint(rows / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def dequantize_array(
    values: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, value: str, group: int
) -> np.ndarray:
    """The float32 weight ``[N, K]`` of packed values (the reference path only)."""
    n = values.shape[0]
    if value == "int4":
        k = values.shape[1] * 2
        v = values.reshape(n, k // group, group // 2)
        q = np.concatenate([v & 15, v >> 4], axis=2).astype(np.float32)
        offset: Any = np.float32(8.0)
    else:
        k = values.shape[1]
        q = values.reshape(n, k // group, group).astype(np.float32)
        offset = np.float32(0.0)
    if zero_points is not None:
        offset = zero_points.astype(np.float32)[:, :, None]
    return ((q - offset) * scales.astype(np.float32)[:, :, None]).reshape(n, k)


def _weight_only(
    rows: np.ndarray,
    values: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    bias: np.ndarray | None,
    value: str,
    group: int,
    path: str | None,
    activation: str = "",
) -> np.ndarray:
    m, k = rows.shape
    n = values.shape[0]
    if path not in (None, "numpy", "portable"):
        raise BackendUnavailableError(
            f"ember: quantized_linear: weight-only kernels have the paths None, 'portable' and 'numpy', got {path!r}"
        )
    kernels = None if path == "numpy" else quant_kernels(portable=path == "portable")
    if kernels is None or group % 32 or rows.shape[0] == 0:
        if path == "portable":
            raise BackendUnavailableError(f"ember: quantized_linear: no compiled kernel for path {path!r} here")
        w = dequantize_array(values, scales, zero_points, value, group)
        out = rows @ w.T
        return activate(out if bias is None else out + bias, activation)
    values = np.ascontiguousarray(values)
    scales = np.ascontiguousarray(scales, dtype=_F32)
    zps = None if zero_points is None else np.ascontiguousarray(zero_points, dtype=np.uint8)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=_F32)
    out = np.empty((m, n), dtype=_F32)
    groups = scales.shape[1]
    row_bytes = values.shape[1]
    if m >= TILE_GEMM_ROWS:
        # Many rows: dequantize TILE_ROWS weight rows at a time into a cache-sized float
        # tile and multiply it with sgemm; the float weight as a whole never exists.
        # The bias and the activation are applied to each tile's block of the output
        # right after its product, while the block is in cache.
        for n0, tile in dequantized_tiles(kernels, values, scales, zps, value, group, k):
            block = out[:, n0 : n0 + tile.shape[0]]
            np.matmul(rows, tile.T, out=block)
            if b is not None:
                np.add(block, b[n0 : n0 + tile.shape[0]], out=block)
            activate(block, activation)
        return out
    if value == "int4":
        kind = "u4" if zps is None else "u4z"
    else:
        kind = "s8" if values.dtype == np.int8 else "u8"
    g32 = group == 32 and kind.startswith("u4")
    x_at, w_at, s_at, y_at = address(rows), address(values), address(scales), address(out)
    z_at = None if zps is None else address(zps)
    b_at = None if b is None else address(b)
    for m0, mc, n0, nc, mr, nr in plan(m, n, WEIGHT_ONLY_TILES):
        kernels.weight_only[(kind, g32, mr, nr)](
            x_at + m0 * k * 4,
            w_at + n0 * row_bytes,
            s_at + n0 * groups * 4,
            None if z_at is None else z_at + n0 * groups,
            None if b_at is None else b_at + n0 * 4,
            y_at + (m0 * n + n0) * 4,
            mc,
            nc,
            k,
            group,
            n,
        )
    return activate(out, activation)


def dequantized_tiles(
    kernels: Any,
    values: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    value: str,
    group: int,
    k: int,
) -> Iterator[tuple[int, np.ndarray]]:
    """``(n0, tile)``: rows ``n0 ..`` of the weight ``[N, k]`` as float32, :data:`TILE_ROWS`
    at a time, dequantized by the compiled kernel into one reused buffer (the float weight
    as a whole never exists). ``values``, ``scales`` and ``zero_points`` are contiguous
    with one row of scales per weight row, ``group`` a multiple of 32."""
    n = values.shape[0]
    kind = "u4" if value == "int4" else ("s8" if values.dtype == np.int8 else "u8")
    zconst = ctypes.c_float(8.0 if value == "int4" else 0.0)
    groups, row_bytes = scales.shape[1], values.shape[1]
    tile = np.empty((TILE_ROWS, k), dtype=_F32)
    for n0 in range(0, n, TILE_ROWS):
        nc = min(TILE_ROWS, n - n0)
        kernels.dequant[kind](
            address(values) + n0 * row_bytes,
            address(scales) + n0 * groups * 4,
            None if zero_points is None else address(zero_points) + n0 * groups,
            address(tile),
            nc,
            k,
            group,
            zconst,
        )
        yield n0, tile[:nc]


@functools.lru_cache(maxsize=512)  # a pure function of the shape, called per layer and step
def plan(m: int, n: int, tiles: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int, int, int, int, int], ...]:
    """Kernel calls ``(m0, rows, n0, cols, mr, nr)`` covering ``[m, n]`` with the compiled
    register tiles: the wide tile over whole row tiles, ``1 x nr`` over the other rows,
    and a tile of one weight row over the columns left."""
    wide = next(t for t in tiles if t[0] > 1)
    narrow = next(t for t in tiles if t[0] == 1 and t[1] > 1)
    m_wide = m - m % wide[0]
    calls = []
    for m0, rows, (mr, nr) in ((0, m_wide, wide), (m_wide, m - m_wide, narrow)):
        if rows == 0:
            continue
        n_main = n - n % nr
        if n_main:
            calls.append((m0, rows, 0, n_main, mr, nr))
        if n_main < n:
            tail_mr = mr if (mr, 1) in tiles else 1
            calls.append((m0, rows, n_main, n - n_main, tail_mr, 1))
    return tuple(calls)


def int8_gemm(
    rows: np.ndarray,
    values: np.ndarray,
    scales: np.ndarray,
    bias: np.ndarray | None,
    input_scale: np.ndarray | None,
    path: str | None,
) -> np.ndarray:
    """``rows [M, K]`` (float32, contiguous) quantized to int8 per row (or by the static
    ``input_scale``) times the int8 weight ``values [N, K]`` with one scale per row
    (``scales [N, 1]``), plus ``bias``: ``[M, N]`` float32."""
    m, k = rows.shape
    n = values.shape[0]
    sw = np.ascontiguousarray(scales.reshape(n), dtype=_F32)
    kernels = quant_kernels() if path != "numpy" else None
    packs = kernels is not None and bool(kernels.packed) and k % 64 == 0 and n % 16 == 0
    if path == "packed" or (path is None and packs and m >= PACKED_ROWS):
        if not packs:
            raise BackendUnavailableError(
                "ember: quantized_linear: the 'packed' int8 kernel needs AVX-512 VNNI, K a multiple of 64 and N of "
                f"16; got K={k}, N={n} on a CPU {'with' if kernels is not None and kernels.vnni else 'without'} it"
            )
        return _int8_packed(kernels, rows, values, sw, bias, input_scale)
    kind = path or ("vnni" if kernels is not None and kernels.vnni else "portable")
    if kernels is None or k % 64 or (kind, 1, 1) not in kernels.gemm:
        if path not in (None, "numpy"):
            raise BackendUnavailableError(f"ember: quantized_linear: no compiled {path!r} kernel on this CPU")
        xq, sx = quantize_rows_int8(rows, input_scale)
        acc = xq.astype(np.float64) @ values.astype(np.float64).T  # exact: |sum| < 2^53
        out = (acc * sx[:, None].astype(np.float64) * sw.astype(np.float64)).astype(_F32)
        return out if bias is None else out + bias
    # From one full register tile of rows on, the rows are padded to whole tiles (zero
    # rows, dropped from the result): no row is left to the one-row kernel, which would
    # read the whole weight again for it.
    tile_m = INT8_TILES[0][0]
    mp = m if m < tile_m else -(-m // tile_m) * tile_m
    xq, sx, xsum = _quantized_rows(kernels, rows, mp, input_scale)
    values = np.ascontiguousarray(values)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=_F32)
    out = np.empty((mp, n), dtype=_F32)
    xq_at, w_at, sx_at, xs_at, sw_at, y_at = (address(a) for a in (xq, values, sx, xsum, sw, out))
    b_at = None if b is None else address(b)
    for m0, mc, n0, nc, mr, nr in plan(mp, n, INT8_TILES):
        kernels.gemm[(kind, mr, nr)](
            xq_at + m0 * k,
            w_at + n0 * k,
            sx_at + m0 * 4,
            xs_at + m0 * 4,
            sw_at + n0 * 4,
            None if b_at is None else b_at + n0 * 4,
            y_at + (m0 * n + n0) * 4,
            mc,
            nc,
            k,
            n,
        )
    return out[:m]


def int4_int8_gemm(
    rows: np.ndarray,
    values: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    bias: np.ndarray | None,
    input_scale: np.ndarray | None,
    group: int,
    path: str | None,
) -> np.ndarray:
    """``rows [M, K]`` (float32, contiguous) on their int8 grid (per row, or the static
    ``input_scale``) times the int4 weight ``values [N, K / 2]``, plus ``bias``. A
    symmetric weight in blocks of 32 with K a multiple of 128 runs
    :mod:`~ember.backend.flex.quant_int4_dynamic` (``path`` ``"vnni"`` or ``"portable"``
    forces one); other shapes multiply the rounded rows by the weight-only kernels
    (``"numpy"``: by the reference)."""
    m, k = rows.shape
    n = values.shape[0]
    if path not in (None, "vnni", "portable", "numpy"):
        raise BackendUnavailableError(
            "ember: quantized_linear: int4 with int8 activations has the paths None, 'vnni', 'portable' and "
            f"'numpy', got {path!r}"
        )
    kernels = quant_kernels() if path != "numpy" else None
    kind = path or ("vnni" if kernels is not None and kernels.vnni else "portable")
    fits = kernels is not None and (kind, 1, 1) in kernels.int4_dynamic
    fits = fits and zero_points is None and group == 32 and k % CHUNK == 0 and m > 0
    if path in ("vnni", "portable") and not fits:
        raise BackendUnavailableError(
            f"ember: quantized_linear: the {path!r} int4 x int8 kernel needs "
            f"{'AVX-512 VNNI, ' if path == 'vnni' else ''}a symmetric weight in blocks of 32 and K a multiple of "
            f"{CHUNK}; got K={k}, group {group}, {'a zero point' if zero_points is not None else 'symmetric'}"
        )
    if not fits:
        if kernels is not None and k % 16 == 0:
            xq, sx, _ = _quantized_rows(kernels, rows, m, input_scale)
        else:
            xq, sx = quantize_rows_int8(rows, input_scale)
        grid = xq.astype(_F32) * sx[:, None]
        return _weight_only(
            grid, values, scales, zero_points, bias, "int4", group, "numpy" if kernels is None else None
        )
    assert kernels is not None
    scratch = np.empty(scratch_bytes(m, k), dtype=np.uint8)
    static = 0.0 if input_scale is None else float(input_scale.reshape(-1)[0])
    values = np.ascontiguousarray(values)
    scales = np.ascontiguousarray(scales, dtype=_F32)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=_F32)
    out = np.empty((m, n), dtype=_F32)
    kernels.int4_linear[kind](
        address(rows),
        address(scratch),
        address(values),
        address(scales),
        None if b is None else address(b),
        address(out),
        m,
        n,
        k,
        ctypes.c_float(static),
    )
    return out


def derived(cache: dict[Any, tuple[Any, Any]], values: np.ndarray, tag: Any, make: Any) -> Any:
    """``make()``, computed once per array ``values`` (and ``tag``) and kept in ``cache``
    until that array is freed (keyed by its ``id``, checked through a weak reference)."""
    key = (id(values), tag)
    held = cache.get(key)
    if held is not None and held[0]() is values:
        return held[1]
    made = make()

    def drop(_: Any) -> None:
        cache.pop(key, None)

    cache[key] = (weakref.ref(values, drop), made)
    return made


def packed_weight(values: np.ndarray) -> np.ndarray:
    """``values`` (int8 ``[N, K]``) packed for the packed kernels, once per array."""
    return derived(_PACKED, values, None, lambda: pack_int8(np.ascontiguousarray(values)))


def _quantized_rows(kernels: Any, rows: np.ndarray, padded: int, input_scale: Any) -> tuple[np.ndarray, ...]:
    """``rows`` ``[m, k]`` quantized to int8 by the compiled row pass (per row, or the
    static ``input_scale``): ``(xq, sx, xsum)`` of ``padded`` rows, zero past ``m``."""
    m, k = rows.shape
    xq = np.empty((padded, k), dtype=np.int8)
    sx = np.empty(padded, dtype=_F32)
    xsum = np.empty(padded, dtype=np.int32)
    static = 0.0 if input_scale is None else float(input_scale.reshape(-1)[0])
    kernels.quantize_rows(address(rows), address(xq), address(sx), address(xsum), m, k, ctypes.c_float(static))
    if padded > m:
        xq[m:] = 0
        sx[m:] = 0.0
        xsum[m:] = 0
    return xq, sx, xsum


def _int8_packed(
    kernels: Any, rows: np.ndarray, values: np.ndarray, sw: np.ndarray, bias: np.ndarray | None, input_scale: Any
) -> np.ndarray:
    """Dynamic int8 on the packed weight: rows padded to whole register tiles (zero rows
    dropped from the result), 4 panels per tile and one panel for the columns left."""
    m, k = rows.shape
    n = values.shape[0]
    mr = PACKED_ROWS
    mp = -(-m // mr) * mr
    xq, sx, xsum = _quantized_rows(kernels, rows, mp, input_scale)
    wp = packed_weight(values)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=_F32)
    out = np.empty((mp, n), dtype=_F32)
    kc = k
    while kc > PACKED_KC and kc % 128 == 0:
        kc //= 2
    wide = 16 * PACKED_TILES[0][1]
    n_main = n - n % wide
    xq_at, wp_at, sx_at, xs_at, sw_at, y_at = (address(a) for a in (xq, wp, sx, xsum, sw, out))
    b_at = None if b is None else address(b)
    for tile, n0, nc in ((PACKED_TILES[0], 0, n_main), (PACKED_TILES[1], n_main, n - n_main)):
        if nc:
            kernels.packed[tile](
                xq_at,
                wp_at + n0 * k,
                sx_at,
                xs_at,
                sw_at + n0 * 4,
                None if b_at is None else b_at + n0 * 4,
                y_at + n0 * 4,
                mp,
                nc,
                k,
                n,
                kc,
            )
    return out[:m]
