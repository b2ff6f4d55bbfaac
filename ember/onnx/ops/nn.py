"""Layer operators: MatMul, Gemm, Det, Conv, ConvTranspose, MaxPool, AveragePool, LpPool (1-3 d),
GlobalAveragePool, GlobalMaxPool, LRN."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.linalg import det as linalg_det
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor
from ember.tensor import layer_ops as M


# ---------------------------------------------------------------------- products
@op("MatMul")
def matmul(node: Node) -> Callable[..., Any]:
    return lambda a, b: a.matmul(b)


@op("Gemm")
def gemm(node: Node) -> Callable[..., Any]:
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    has_c = node.has(2)
    c_shape = node.shape(2)
    b_shape = node.shape(1)
    n = None if b_shape is None else b_shape[0 if trans_b else 1]
    # The common layer: x @ W.T + b with a bias of one value per output (a fused linear).
    linear = (
        alpha == 1.0
        and beta == 1.0
        and not trans_a
        and (not has_c or (c_shape is not None and n is not None and tuple(c_shape) in ((n,), (1, n))))
    )
    if linear:
        flat_bias = c_shape is not None and len(c_shape) == 2

        def run_linear(a: Tensor, b: Tensor, c: Tensor | None = None) -> Tensor:
            weight = b.permute([1, 0]) if trans_b else b
            if c is not None and flat_bias:
                c = c.reshape([-1])
            return M.linear(a, weight, c)

        return run_linear

    def run(a: Tensor, b: Tensor, c: Tensor | None = None) -> Tensor:
        a = a.permute([1, 0]) if trans_a else a
        b = b.permute([1, 0]) if trans_b else b
        out = a.matmul(b)
        if alpha != 1.0:
            out = out * alpha
        if c is not None and beta != 0.0:
            out = out + (c * beta if beta != 1.0 else c)
        return out

    return run


# ---------------------------------------------------------------------- convolution
def _same_pads(
    sizes: list[int], kernel: list[int], strides: list[int], dilations: list[int], upper: bool
) -> list[tuple[int, int]]:
    out = []
    for n, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        small, large = total // 2, total - total // 2
        out.append((small, large) if upper else (large, small))
    return out


def _conv_pads(node: Node, spatial: int) -> Callable[[list[int], list[int], list[int], list[int]], Any]:
    """A function of the input's spatial sizes giving ``(before, after)`` per spatial dim."""
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        upper = auto_pad == "SAME_UPPER"
        return lambda sizes, kernel, strides, dilations: _same_pads(sizes, kernel, strides, dilations, upper)
    if auto_pad == "VALID":
        fixed = [(0, 0)] * spatial
    elif auto_pad == "NOTSET":
        pads = node.ints("pads", [0] * (2 * spatial))
        if len(pads) != 2 * spatial:
            raise node.error(f"pads {pads} must hold {2 * spatial} values (a begin and an end per spatial dim)")
        fixed = list(zip(pads[:spatial], pads[spatial:]))
    else:
        raise node.error(f"auto_pad {auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    return lambda sizes, kernel, strides, dilations: fixed


_CONV = {1: M.conv1d, 2: M.conv2d, 3: M.conv3d}
_CONV_T = {1: M.conv_transpose1d, 2: M.conv_transpose2d, 3: M.conv_transpose3d}


def _spatial_rank(node: Node) -> int:
    kernel = node.ints("kernel_shape")
    if kernel is not None:
        return len(kernel)
    w = node.shape(1)
    if w is None:
        raise node.error("needs kernel_shape or a weight of known rank")
    return len(w) - 2


@op("Conv")
def conv(node: Node) -> Callable[..., Any]:
    spatial = _spatial_rank(node)
    if spatial not in _CONV:
        raise node.error(f"{spatial}-d convolution is not supported (1, 2 or 3 spatial dims)")
    fn = _CONV[spatial]
    strides = node.ints("strides", [1] * spatial)
    dilations = node.ints("dilations", [1] * spatial)
    groups = int(node.attr("group", 1))
    pads_of = _conv_pads(node, spatial)

    def run(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
        kernel = w.dims()[2:]
        pads = pads_of(x.dims()[2:], kernel, strides, dilations)
        return fn(x, w, b, tuple(strides), tuple(pads), tuple(dilations), groups)

    return run


@op("ConvTranspose")
def conv_transpose(node: Node) -> Callable[..., Any]:
    spatial = _spatial_rank(node)
    if spatial not in _CONV_T:
        raise node.error(f"{spatial}-d transposed convolution is not supported (1, 2 or 3 spatial dims)")
    fn = _CONV_T[spatial]
    strides = node.ints("strides", [1] * spatial)
    dilations = node.ints("dilations", [1] * spatial)
    groups = int(node.attr("group", 1))
    output_padding = node.ints("output_padding", [0] * spatial)
    output_shape = node.ints("output_shape")
    auto_pad = node.attr("auto_pad", "NOTSET")
    pads_attr = node.ints("pads")

    def pads_for(sizes: list[int], kernel: list[int]) -> tuple[list[tuple[int, int]], list[int]]:
        extra = list(output_padding)
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            targets = output_shape[-spatial:] if output_shape is not None else [n * s for n, s in zip(sizes, strides)]
            pads = []
            for i, (n, k, s, d, t) in enumerate(zip(sizes, kernel, strides, dilations, targets)):
                total = s * (n - 1) + extra[i] + (k - 1) * d + 1 - t
                if total < 0:  # the target is larger: grow the output at its end
                    extra[i] -= total
                    total = 0
                half = total // 2
                pads.append((half, total - half) if auto_pad == "SAME_UPPER" else (total - half, half))
            return pads, extra
        if auto_pad == "VALID" or pads_attr is None:
            return [(0, 0)] * spatial, extra
        return list(zip(pads_attr[:spatial], pads_attr[spatial:])), extra

    def run(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
        pads, extra = pads_for(x.dims()[2:], w.dims()[2:])
        return fn(x, w, b, tuple(strides), tuple(pads), tuple(extra), tuple(dilations), groups)

    return run


# ---------------------------------------------------------------------- pooling
def _pool_setup(node: Node) -> tuple[int, list[int], list[int], list[int], Any, bool]:
    kernel = node.ints("kernel_shape")
    if kernel is None:
        raise node.error("kernel_shape is required")
    spatial = len(kernel)
    if spatial not in (1, 2, 3):
        raise node.attr_error("kernel_shape", f"{spatial}-d pooling is not supported (1, 2 or 3 spatial dims)")
    strides = node.ints("strides", [1] * spatial)
    dilations = node.ints("dilations", [1] * spatial)
    return spatial, kernel, strides, dilations, _conv_pads(node, spatial), bool(node.attr("ceil_mode", 0))


def _wide_pads(pads: tuple[tuple[int, int], ...], kernel: list[int], dilations: list[int]) -> bool:
    """Whether some pad is wider than half the (dilated) window, which ember's pooling refuses
    and ONNX allows: the input is then padded before pooling."""
    return any(max(p) > ((k - 1) * d + 1) // 2 for p, k, d in zip(pads, kernel, dilations))


def _pre_pad(x: Tensor, pads: tuple[tuple[int, int], ...], value: float) -> Tensor:
    """``x`` with ``pads`` (a ``(before, after)`` per spatial dim) added, as Tensor.pad takes them."""
    flat = [w for before, after in reversed(pads) for w in (before, after)]
    return x.pad(flat, value)


def _separable(x: Tensor, spatial: int, pool: Callable[..., Tensor], params: list[Any]) -> Tensor:
    """3-d max or average pooling as a 2-d pooling of every depth slice, then a 1-d pooling
    along the depth: both reductions are separable per axis (a box's maximum is the maximum
    over depth of each slice's maximum; its mean, with a divisor that is a product of
    per-axis counts, the mean of the means). ``params[i]`` holds each argument's value per
    spatial dim; ``pool(t, rank, *args)`` pools the last ``rank`` dims of ``t``."""
    if spatial < 3:
        return pool(x, spatial, *[tuple(p) for p in params])
    n, c, d, h, w = x.dims()
    planes = pool(x.reshape([n, c * d, h, w]), 2, *[tuple(p[1:]) for p in params])
    h2, w2 = planes.dims()[2:]
    columns = planes.reshape([n, c, d, h2 * w2]).permute([0, 1, 3, 2]).reshape([n, c * h2 * w2, d])
    out = pool(columns, 1, *[tuple(p[:1]) for p in params])
    d2 = out.dims()[2]
    return out.reshape([n, c, h2, w2, d2]).permute([0, 1, 4, 2, 3])


def _max(ceil_mode: bool) -> Callable[..., Tensor]:
    def pool(t: Tensor, rank: int, kernel: Any, strides: Any, pads: Any, dilations: Any) -> Tensor:
        fn = M.max_pool1d if rank == 1 else M.max_pool2d
        return fn(t, kernel, strides, pads, dilations, ceil_mode)

    return pool


def _avg(ceil_mode: bool, include_pad: bool) -> Callable[..., Tensor]:
    def pool(t: Tensor, rank: int, kernel: Any, strides: Any, pads: Any) -> Tensor:
        fn = M.avg_pool1d if rank == 1 else M.avg_pool2d
        return fn(t, kernel, strides, pads, include_pad, ceil_mode)

    return pool


@op("MaxPool")
def max_pool(node: Node) -> Callable[..., Any]:
    spatial, kernel, strides, dilations, pads_of, ceil_mode = _pool_setup(node)
    if int(node.attr("storage_order", 0)):
        raise node.attr_error("storage_order", "column-major indices are not supported")
    with_indices = len(node.outputs) > 1 and node.outputs[1] != ""
    if with_indices and spatial == 3:
        raise node.error("the Indices output of a 3-d MaxPool is not supported")
    pool = _max(ceil_mode)

    def plain(x: Tensor, kernel: Any, strides: Any, pads: Any, dilations: Any, ceil_mode: bool) -> Tensor:
        return _separable(x, spatial, pool, [kernel, strides, pads, dilations])

    indexed = M.max_pool1d_with_indices if spatial == 1 else M.max_pool2d_with_indices

    def run(x: Tensor) -> Any:
        if not x.is_float():  # ONNX pools ints too (uint8 images): exact in float64, cast back
            out = run(x.cast("float64"))
            return (out[0].cast(x.dtype), out[1]) if with_indices else out.cast(x.dtype)
        pads = tuple(pads_of(x.dims()[2:], kernel, strides, dilations))
        if _wide_pads(pads, kernel, dilations) and not with_indices:
            x, pads = _pre_pad(x, pads, float("-inf")), tuple((0, 0) for _ in pads)
        args = (tuple(kernel), tuple(strides), pads, tuple(dilations), ceil_mode)
        if not with_indices:
            return plain(x, *args)
        if _wide_pads(pads, kernel, dilations):
            raise node.error(
                f"attribute pads={node.ints('pads')}: pads wider than half the kernel are not supported "
                "with the Indices output"
            )
        y, indices = indexed(x, *args)
        # ONNX counts positions over the whole tensor: add each (batch, channel) plane's start.
        n, c = x.dims()[:2]
        plane = 1
        for d in x.dims()[2:]:
            plane *= d
        start = Tensor.arange(n * c, device=x.device).reshape([n, c] + [1] * spatial) * plane
        return y, indices + start

    return run


def _dilated_sum(x: Tensor, kernel: list[int], strides: list[int], pads: Any, dilations: list[int], ceil: bool) -> Any:
    """The sum over each dilated window (zeros in the padding), and how many positions of
    each window lie in the input and in the explicit padding: one strided slice per
    kernel tap, added up (ember's pooling has no dilated average)."""
    sizes = x.dims()[2:]
    outs, extra = [], []
    for n, k, s, d, (before, after) in zip(sizes, kernel, strides, dilations, pads):
        span = n + before + after - ((k - 1) * d + 1)
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= n + before:  # a last window starting in the padding is dropped
            o -= 1
        outs.append(o)
        extra.append(max((o - 1) * s + (k - 1) * d + 1 - (n + before + after), 0))
    flat = [w for (before, after), e in reversed(list(zip(pads, extra))) for w in (before, after + e)]
    padded = x.pad(flat)
    ones = np.pad(np.ones(sizes), [(b, a + e) for (b, a), e in zip(pads, extra)])
    inside = np.pad(np.ones(sizes), [(b, a) for b, a in pads], constant_values=1)  # input and explicit pads
    inside = np.pad(inside, [(0, e) for e in extra])  # not the overhang of a ceil_mode window
    total: Any = None
    counts = np.zeros(outs)
    covered = np.zeros(outs)
    for taps in np.ndindex(*kernel):
        picks = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(taps, dilations, outs, strides))
        part = padded[(slice(None), slice(None), *picks)]
        total = part if total is None else total + part
        counts += ones[picks]
        covered += inside[picks]
    return total, counts, covered


@op("AveragePool")
def average_pool(node: Node) -> Callable[..., Any]:
    spatial, kernel, strides, dilations, pads_of, ceil_mode = _pool_setup(node)
    include_pad = bool(node.attr("count_include_pad", 0))
    if any(d != 1 for d in dilations):

        def dilated(x: Tensor) -> Tensor:
            pads = tuple(pads_of(x.dims()[2:], kernel, strides, dilations))
            total, counts, covered = _dilated_sum(x, kernel, strides, pads, dilations, ceil_mode)
            divisor = covered if include_pad else counts
            return total / Tensor.from_data(np.maximum(divisor, 1).astype(x.dtype.np), device=x.device)

        return dilated

    def fn(x: Tensor, kernel: Any, strides: Any, pads: Any, include: bool, ceil_mode: bool) -> Tensor:
        return _separable(x, spatial, _avg(ceil_mode, include), [kernel, strides, pads])

    def run(x: Tensor) -> Tensor:
        pads = tuple(pads_of(x.dims()[2:], kernel, strides, dilations))
        if not _wide_pads(pads, kernel, dilations):
            return fn(x, tuple(kernel), tuple(strides), pads, include_pad, ceil_mode)
        # Pads wider than half the kernel: pad with zeros first; the divisor is the window's
        # size within the padded input (count_include_pad=1) or its count of input elements.
        none = tuple((0, 0) for _ in pads)
        sums = fn(_pre_pad(x, pads, 0.0), tuple(kernel), tuple(strides), none, True, ceil_mode)
        if include_pad:
            return sums
        ones = _pre_pad(x.ones_like().narrow(0, 0, 1).narrow(1, 0, 1), pads, 0.0)
        counts = fn(ones, tuple(kernel), tuple(strides), none, True, ceil_mode)
        return sums / counts

    return run


@op("LpPool")
def lp_pool(node: Node) -> Callable[..., Any]:
    """``(sum of |x|^p over the window)^(1/p)``, padding counted as zeros: the sum is the
    mean with pads included times the window's count of in-bounds positions."""
    spatial, kernel, strides, dilations, pads_of, ceil_mode = _pool_setup(node)
    p = float(node.attr("p", 2))
    pool = _avg(ceil_mode, True)

    def run(x: Tensor) -> Tensor:
        pads = tuple(pads_of(x.dims()[2:], kernel, strides, dilations))
        powered = x.abs() if p == 1 else x.abs().powf_scalar(p)
        if any(d != 1 for d in dilations):
            total = _dilated_sum(powered, kernel, strides, pads, dilations, ceil_mode)[0]
            return total if p == 1 else total.powf_scalar(1.0 / p)
        padded = _pre_pad(powered, pads, 0.0)
        none = tuple((0, 0) for _ in pads)
        means = _separable(padded, spatial, pool, [kernel, strides, none])
        counts = np.ones((1,), np.float64)
        for n, k, s, m in zip(padded.dims()[2:], kernel, strides, means.dims()[2:]):
            starts = np.arange(m) * s
            counts = np.multiply.outer(counts, np.minimum(starts + k, n) - starts)
        sums = means * Tensor.from_data(counts.reshape([1, 1, *means.dims()[2:]]).astype(x.dtype.np), device=x.device)
        return sums if p == 1 else sums.powf_scalar(1.0 / p)

    return run


@op("GlobalAveragePool")
def global_average_pool(node: Node) -> Callable[..., Any]:
    return lambda x: x.mean_dims(list(range(2, x.rank)))


@op("GlobalMaxPool")
def global_max_pool(node: Node) -> Callable[..., Any]:
    return lambda x: x.max_dims(list(range(2, x.rank)))


@op("LRN")
def lrn(node: Node) -> Callable[..., Any]:
    size = int(node.attr("size"))
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2

    def run(x: Tensor) -> Tensor:
        c = x.dims()[1]
        squares = (x * x).pad([0, 0] * (x.rank - 2) + [before, after])
        total = squares.narrow(1, 0, c)
        for i in range(1, size):
            total = total + squares.narrow(1, i, c)
        return x / (total * (alpha / size) + bias).powf_scalar(beta)

    return run


@op("Det", since=11)
def det(node: Node) -> Callable[..., Any]:
    def run(x: Tensor) -> Tensor:
        if x.rank < 2 or x.dims()[-1] != x.dims()[-2]:
            raise node.error(f"X must be [..., M, M] (square matrices), got {x.dims()}")
        return linalg_det(x)

    return run
