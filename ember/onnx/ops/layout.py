"""Shape and layout operators: Shape, Reshape, Flatten, Transpose, Squeeze,
Unsqueeze, Concat, Split, Slice, Expand, Tile, Pad, DepthToSpace, SpaceToDepth, Trilu.

Each has a numpy form as well, so that shape arithmetic folds at load (static
shapes) or runs on the host at ``forward`` (a dynamic batch dim)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from ember.onnx.ops.common import axes, axis, dims, ints, scalar
from ember.onnx.ops.registry import Node, numpy_op, op
from ember.tensor import Tensor

INT64_MAX = np.iinfo(np.int64).max


# ---------------------------------------------------------------------- Shape, Size
@op("Shape", shape_of=True)
def shape(node: Node) -> Callable[..., Any]:
    start = node.attr("start")
    end = node.attr("end")

    def run(x: Any) -> np.ndarray:
        full = dims(x)
        return np.array(full[slice(start, end)], dtype=np.int64)

    return run


numpy_op("Shape")(shape)


@op("Size", shape_of=True)
def size(node: Node) -> Callable[..., Any]:
    return lambda x: np.array(math.prod(dims(x)), dtype=np.int64)


numpy_op("Size")(size)


# ---------------------------------------------------------------------- Reshape, Flatten
def reshape_target(node: Node, shape: list[int], target: list[int], allowzero: bool) -> list[int]:
    """ONNX's target shape with its 0 (copy the input's dim) and -1 (infer) resolved."""
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise node.error(f"the target shape {target} copies dim {i} (a 0) of an input of shape {shape}")
            out.append(shape[i])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise node.error(f"the target shape {target} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        total = math.prod(shape)
        if known == 0 or total % known:
            raise node.error(f"cannot reshape an input of shape {shape} to {target}")
        out[out.index(-1)] = total // known
    if math.prod(out) != math.prod(shape):
        raise node.error(f"cannot reshape an input of shape {shape} ({math.prod(shape)} values) to {target}")
    return out


@op("Reshape", host=(1,))
def reshape(node: Node) -> Callable[..., Any]:
    allowzero = bool(node.attr("allowzero", 0))
    const = node.const(1)
    if const is not None and 0 not in ints(const):
        fixed = ints(const)  # -1 is resolved by ember's reshape
        return lambda x, _shape: x.reshape(fixed)

    def run(x: Any, target: np.ndarray) -> Any:
        out = reshape_target(node, dims(x), ints(target), allowzero)
        return x.reshape(out)

    return run


numpy_op("Reshape")(reshape)


def _flatten_shape(node: Node, shape: list[int]) -> list[int]:
    a = int(node.attr("axis", 1))
    a = a + len(shape) if a < 0 else a
    if not 0 <= a <= len(shape):
        raise node.error(f"axis {node.attr('axis', 1)} is out of range for rank {len(shape)}")
    return [math.prod(shape[:a]), math.prod(shape[a:])]


@op("Flatten")
def flatten(node: Node) -> Callable[..., Any]:
    node.uses("axis")  # read per input shape (_flatten_shape)
    return lambda x: x.reshape(_flatten_shape(node, dims(x)))


numpy_op("Flatten")(flatten)


# ---------------------------------------------------------------------- Transpose
@op("Transpose")
def transpose(node: Node) -> Callable[..., Any]:
    perm = node.ints("perm")

    def run(x: Tensor) -> Tensor:
        p = perm if perm is not None else list(range(x.rank))[::-1]
        return x.permute(p)

    return run


@numpy_op("Transpose")
def _np_transpose(node: Node) -> Callable[..., Any]:
    perm = node.ints("perm")
    return lambda x: np.transpose(x, perm)


# ---------------------------------------------------------------------- Squeeze, Unsqueeze
def _axes_arg(node: Node, given: Any) -> list[int] | None:
    """Axes from the input (opset 13+) or the attribute (before)."""
    if given is not None:
        return ints(given)
    return node.ints("axes")


@op("Squeeze", host=(1,))
def squeeze(node: Node) -> Callable[..., Any]:
    node.uses("axes")  # an attribute before opset 13 (_axes_arg)

    def run(x: Any, given: Any = None) -> Any:
        shape = dims(x)
        chosen = _axes_arg(node, given)
        if chosen is None:
            keep = [d for d in shape if d != 1]
        else:
            drop = set(axes(node, chosen, len(shape)))
            for a in drop:
                if shape[a] != 1:
                    raise node.error(f"cannot squeeze dim {a} of size {shape[a]} (input shape {shape})")
            keep = [d for i, d in enumerate(shape) if i not in drop]
        return x.reshape(keep)

    return run


numpy_op("Squeeze")(squeeze)


@op("Unsqueeze", host=(1,))
def unsqueeze(node: Node) -> Callable[..., Any]:
    node.uses("axes")  # an attribute before opset 13 (_axes_arg)

    def run(x: Any, given: Any = None) -> Any:
        shape = dims(x)
        chosen = _axes_arg(node, given) or []
        rank = len(shape) + len(chosen)
        inserted = sorted(axes(node, chosen, rank))
        if len(set(inserted)) != len(inserted):
            raise node.error(f"axes {chosen} repeat a dim")
        out, rest = [], iter(shape)
        for i in range(rank):
            out.append(1 if i in inserted else next(rest))
        return x.reshape(out)

    return run


numpy_op("Unsqueeze")(unsqueeze)


# ---------------------------------------------------------------------- Concat, Split
@op("Concat")
def concat(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", 0))

    def run(*xs: Tensor) -> Tensor:
        d = axis(node, a, xs[0].rank)
        pieces = [x for x in xs if x.dims()[d]] or [xs[0]]  # empty pieces add nothing
        return pieces[0] if len(pieces) == 1 else Tensor.cat(pieces, d)

    return run


@numpy_op("Concat")
def _np_concat(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", 0))

    def run(*xs: np.ndarray) -> np.ndarray:
        return np.concatenate([np.asarray(x) for x in xs], axis=axis(node, a, np.ndim(xs[0])))

    return run


def _split_sizes(node: Node, length: int, given: Any) -> list[int]:
    if given is not None and np.size(given):
        sizes = ints(given)
    elif node.attr("split") is not None:  # before opset 13
        sizes = [int(v) for v in node.attr("split")]
    else:
        n = int(node.attr("num_outputs", len(node.outputs)))
        if node.attr("num_outputs") is not None:  # opset 18: ceil, the last piece smaller
            chunk = -(-length // n)
            sizes = [min(chunk, max(length - i * chunk, 0)) for i in range(n)]
        else:
            if length % n:
                raise node.error(f"cannot split a dim of {length} into {n} equal outputs")
            sizes = [length // n] * n
    if sum(sizes) != length:
        raise node.error(f"the split sizes {sizes} do not add up to the dim's {length}")
    return sizes


@op("Split", host=(1,))
def split(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", 0))
    node.uses("split", "num_outputs")  # read per input shape (_split_sizes)

    def run(x: Tensor, given: Any = None) -> tuple[Tensor, ...]:
        d = axis(node, a, x.rank)
        return tuple(x.split_with_sizes(_split_sizes(node, x.dims()[d], given), d))

    return run


@numpy_op("Split")
def _np_split(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", 0))
    node.uses("split", "num_outputs")

    def run(x: np.ndarray, given: Any = None) -> tuple[np.ndarray, ...]:
        d = axis(node, a, x.ndim)
        sizes = _split_sizes(node, x.shape[d], given)
        return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=d))

    return run


# ---------------------------------------------------------------------- Slice
def slices(
    node: Node, shape: list[int], starts: list[int], ends: list[int], chosen: list[int] | None, steps: list[int] | None
) -> tuple[slice, ...]:
    """ONNX's Slice arguments (clamped as ONNX clamps them) as Python slices."""
    rank = len(shape)
    chosen = list(range(len(starts))) if chosen is None else axes(node, chosen, rank)
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(chosen) == len(steps):
        raise node.error(f"starts {starts}, ends {ends}, axes and steps must have one entry per sliced axis")
    out = [slice(None)] * rank
    for a, start, end, step in zip(chosen, starts, ends, steps):
        n = shape[a]
        if step == 0:
            raise node.error("a step of 0")
        start = start + n if start < 0 else start
        end = end + n if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), n), min(max(end, 0), n)
            out[a] = slice(start, end, step)
        else:
            start, end = min(max(start, -1), n - 1), min(max(end, -1), n - 1)
            out[a] = slice(start, None if end < 0 else end, step) if start >= 0 else slice(0, 0)
    return tuple(out)


@op("Slice", host=(1, 2, 3, 4))
def slice_(node: Node) -> Callable[..., Any]:
    node.uses("starts", "ends", "axes")  # attributes before opset 10

    def run(x: Any, starts: Any = None, ends: Any = None, chosen: Any = None, steps: Any = None) -> Any:
        if node.version < 10:  # attributes before opset 10
            starts_, ends_, axes_, steps_ = node.ints("starts"), node.ints("ends"), node.ints("axes"), None
            if starts_ is None or ends_ is None:
                raise node.error("the starts and ends attributes are required before opset 10")
        else:
            starts_, ends_ = ints(starts), ints(ends)
            axes_ = None if chosen is None else ints(chosen)
            steps_ = None if steps is None else ints(steps)
        return x[slices(node, dims(x), starts_, ends_, axes_, steps_)]

    return run


numpy_op("Slice")(slice_)


# ---------------------------------------------------------------------- Expand, Tile
@op("Expand", host=(1,))
def expand(node: Node) -> Callable[..., Any]:
    def run(x: Any, target: np.ndarray) -> Any:
        try:
            out = list(np.broadcast_shapes(tuple(dims(x)), tuple(ints(target))))
        except ValueError:
            raise node.error(f"cannot expand an input of shape {dims(x)} to {ints(target)}") from None
        if out == dims(x):
            return x
        return x.expand(out) if isinstance(x, Tensor) else np.broadcast_to(x, out).copy()

    return run


numpy_op("Expand")(expand)


@op("Tile", host=(1,))
def tile(node: Node) -> Callable[..., Any]:
    def run(x: Any, repeats: np.ndarray) -> Any:
        reps = ints(repeats)
        if isinstance(x, Tensor):
            return x if all(r == 1 for r in reps) else x.repeat(reps)
        return np.tile(x, reps)

    return run


numpy_op("Tile")(tile)


# ---------------------------------------------------------------------- Pad
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}
_NP_PAD_MODES: dict[str, Literal["reflect", "edge", "wrap"]] = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@op("Pad", host=(1, 2, 3))
def pad(node: Node) -> Callable[..., Any]:
    mode = node.attr("mode", "constant")
    if mode not in _PAD_MODES:
        raise node.attr_error("mode", f"is not one of {', '.join(_PAD_MODES)}")
    node.uses("pads", "value")  # attributes before opset 11

    def run(x: Any, pads: Any = None, value: Any = None, chosen: Any = None) -> Any:
        rank = len(dims(x))
        widths = ints(pads) if node.version >= 11 else node.ints("pads", [])
        fill = (
            (scalar(value) if value is not None and np.size(value) else 0)
            if node.version >= 11
            else node.attr("value", 0.0)
        )
        which = axes(node, ints(chosen), rank) if chosen is not None else list(range(rank))
        if len(widths) != 2 * len(which):
            raise node.error(f"pads {widths} must hold a begin and an end for each of {len(which)} axes")
        before = dict(zip(which, widths[: len(which)]))
        after = dict(zip(which, widths[len(which) :]))
        if isinstance(x, np.ndarray):
            spec = [(before.get(d, 0), after.get(d, 0)) for d in range(rank)]
            if any(a < 0 or b < 0 for a, b in spec):
                raise node.error("negative pads of host values")
            if mode == "constant":
                return np.pad(x, spec, mode="constant", constant_values=fill)
            return np.pad(x, spec, mode=_NP_PAD_MODES[mode])
        torch_order: list[int] = []
        for d in range(rank - 1, -1, -1):
            torch_order += [before.get(d, 0), after.get(d, 0)]
        while len(torch_order) > 2 and torch_order[-2:] == [0, 0]:
            torch_order = torch_order[:-2]
        if not any(torch_order):
            return x
        return x.pad(torch_order, fill, _PAD_MODES[mode])

    return run


numpy_op("Pad")(pad)


# ---------------------------------------------------------------------- depth and space
@op("DepthToSpace")
def depth_to_space(node: Node) -> Callable[..., Any]:
    b = int(node.attr("blocksize"))
    mode = node.attr("mode", "DCR")

    def run(x: Tensor) -> Tensor:
        n, c, h, w = x.dims()
        if mode == "CRD":
            return (
                x.reshape([n, c // (b * b), b, b, h, w])
                .permute([0, 1, 4, 2, 5, 3])
                .reshape([n, c // (b * b), h * b, w * b])
            )
        return (
            x.reshape([n, b, b, c // (b * b), h, w])
            .permute([0, 3, 4, 1, 5, 2])
            .reshape([n, c // (b * b), h * b, w * b])
        )

    return run


@op("SpaceToDepth")
def space_to_depth(node: Node) -> Callable[..., Any]:
    b = int(node.attr("blocksize"))
    mode = node.attr("mode", "DCR")  # opset 28
    if mode not in ("DCR", "CRD"):
        raise node.error(f"attribute mode={mode!r} is not one of DCR, CRD")
    order = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]

    def run(x: Tensor) -> Tensor:
        n, c, h, w = x.dims()
        return x.reshape([n, c, h // b, b, w // b, b]).permute(order).reshape([n, c * b * b, h // b, w // b])

    return run


@op("Trilu", host=(1,))
def trilu(node: Node) -> Callable[..., Any]:
    upper = bool(node.attr("upper", 1))

    def run(x: Any, k: Any = None) -> Any:
        diagonal = int(scalar(k)) if k is not None else 0
        if isinstance(x, np.ndarray):
            return np.triu(x, diagonal) if upper else np.tril(x, diagonal)
        return x.triu(diagonal) if upper else x.tril(diagonal)

    return run


numpy_op("Trilu")(trilu)
