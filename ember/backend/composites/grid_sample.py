"""``grid_sample`` (``torch.nn.functional.grid_sample``'s formulas): one ``gather`` per
corner of each point's cell and a weighted sum. Source coordinates follow PyTorch:
``x = ((g + 1) * size - 1) / 2`` (``(g + 1) / 2 * (size - 1)`` with ``align_corners``),
then clipped (``border``) or reflected and clipped (``reflection``); ``nearest`` rounds
half to even."""

from __future__ import annotations

import itertools
import math
from typing import Any

from ember.backend.composites.registry import composite, stop_gradient
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, UnaryOp


def _mul(ops: Any, a: Any, b: Any) -> Any:
    return ops.binary(BinaryOp.MUL, a, b)


def _add(ops: Any, a: Any, b: Any) -> Any:
    return ops.binary(BinaryOp.ADD, a, b)


def _reflect(ops: Any, c: Any, twice_low: int, twice_high: int) -> Any:
    if twice_low == twice_high:
        return ops.full(tuple(c.shape), 0.0, DType.from_numpy(c.dtype))
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    c = ops.unary(UnaryOp.ABS, ops.binary(BinaryOp.SUB, c, low))
    extra = ops.binary(BinaryOp.REMAINDER, c, span)  # c >= 0: fmod
    turns = ops.unary(UnaryOp.FLOOR, ops.binary(BinaryOp.DIV, c, span))
    odd = ops.binary(BinaryOp.EQ, ops.binary(BinaryOp.REMAINDER, turns, 2.0), 1.0)
    return ops.where(odd, _add(ops, ops.unary(UnaryOp.NEG, extra), span + low), _add(ops, extra, low))


def _source(ops: Any, g: Any, size: int, padding_mode: str, align_corners: bool) -> Any:
    if align_corners:
        c = _mul(ops, ops.binary(BinaryOp.DIV, _add(ops, g, 1.0), 2.0), float(size - 1))
    else:
        c = ops.binary(BinaryOp.DIV, ops.binary(BinaryOp.SUB, _mul(ops, _add(ops, g, 1.0), float(size)), 1.0), 2.0)
    if padding_mode == "border":
        c = ops.clamp(c, 0.0, float(size - 1))
    elif padding_mode == "reflection":
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        c = ops.clamp(_reflect(ops, c, *twice), 0.0, float(size - 1))
    return c


@composite("grid_sample")
def grid_sample(ops: Any, x: Any, grid: Any, mode: str, padding_mode: str, align_corners: bool) -> Any:
    """``x`` ``[N, C, *spatial]`` sampled at ``grid`` ``[N, *out, rank]`` (x first):
    ``[N, C, *out]``."""
    n, c, *spatial = x.shape
    out = list(grid.shape)[1:-1]
    rank = len(spatial)
    points = math.prod(out)
    g = ops.reshape(grid, (n, points, rank))
    coords = [
        _source(
            ops,
            ops.reshape(ops.slice(g, ((0, n, 1), (0, points, 1), (rank - 1 - d, rank - d, 1))), (n, points)),
            size,
            padding_mode,
            align_corners,
        )
        for d, size in enumerate(spatial)
    ]
    strides = [math.prod(spatial[d + 1 :]) for d in range(rank)]
    slab = ops.reshape(x, (n, c, math.prod(spatial)))
    taps: list[tuple[list[Any], Any]]
    if mode == "nearest":
        taps = [([ops.unary(UnaryOp.ROUND, co) for co in coords], None)]
    else:
        low = [ops.unary(UnaryOp.FLOOR, co) for co in coords]
        frac = [ops.binary(BinaryOp.SUB, co, f) for co, f in zip(coords, low)]
        taps = []
        for bits in itertools.product((0, 1), repeat=rank):
            weight = None
            for d, bit in enumerate(bits):
                w = frac[d] if bit else _add(ops, ops.unary(UnaryOp.NEG, frac[d]), 1.0)
                weight = w if weight is None else _mul(ops, weight, w)
            taps.append(([_add(ops, f, 1.0) if bit else f for f, bit in zip(low, bits)], weight))
    result = None
    for at, weight in taps:
        valid = None
        for i, size in zip(at, spatial):
            inside = ops.binary(
                BinaryOp.LOGICAL_AND, ops.binary(BinaryOp.GE, i, 0.0), ops.binary(BinaryOp.LE, i, float(size - 1))
            )
            valid = inside if valid is None else ops.binary(BinaryOp.LOGICAL_AND, valid, inside)
        assert valid is not None
        flat = None
        for i, stride in zip(at, strides):
            index = ops.cast(ops.where(valid, stop_gradient(ops, i), 0.0), DType.INT64)
            index = _mul(ops, index, stride)
            flat = index if flat is None else _add(ops, flat, index)
        assert flat is not None
        w = ops.cast(valid, DType.from_numpy(x.dtype)) if weight is None else ops.where(valid, weight, 0.0)
        values = ops.gather(slab, 2, ops.expand(ops.reshape(flat, (n, 1, points)), (n, c, points)))
        term = _mul(ops, values, ops.reshape(w, (n, 1, points)))
        result = term if result is None else _add(ops, result, term)
    assert result is not None
    return ops.reshape(result, (n, c, *out))
