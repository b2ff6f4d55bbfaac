"""Convolution chains: a schedule pass that runs a convolution, its elementwise
epilogue and a max pooling per sample, while the sample's values are in cache.

A CNN's ``conv -> relu -> max_pool`` schedules as three steps, each a pass over the
whole batch: the convolution (:class:`~ember.backend.fusion.steps.Library`), the
kernel of the elementwise ops that read its output (:class:`Kernel`), and the
pooling (:class:`Library`). :func:`fuse_conv_chains` replaces such a run of steps
with one :class:`ConvChain`, which a target runs per sample: the convolution of the
sample, the kernel over the sample's block (the bias added where the kernel reads
the convolution's output, so there is no separate bias pass), then the pooling of
the sample's block. The values later steps read are still stored where they read
them; a value only the chain reads (the convolution's output read by the kernel
alone, the kernel's output read by the pooling alone) lives in scratch, one sample
at a time.

Each element is computed by the same operations in the same order as by the three
steps (the bias is one addition either way), so the results are bit-identical.

The pattern, exactly (anything else keeps the steps as they are):

* a ``conv`` library step;
* directly after it (once independent kernels scheduled in between, such as a batch
  norm's per-channel scale and shift, are moved before it), a kernel without reductions over as many elements, that reads
  the convolution's output only densely (element for element), whose other reads
  can be split by sample (a view over the convolution's output shape, with one
  stride along the sample dim per buffer), and that stores only over its full space;
* optionally, directly after that, a ``max_pool`` or ``max_pool_with_indices`` library step whose
  input is one of the kernel's stores, with the same samples.
"""

from __future__ import annotations

import numpy as np

from ember.backend.fusion.steps import ConvChain, Library, Schedule, Step
from ember.backend.kernel.exprs import Expr, Exprs
from ember.backend.kernel.steps import Kernel, Store
from ember.backend.kernel.views import View, size_of
from ember.backend.ops import BinaryOp

#: The most independent kernels moved from between a convolution and its epilogue.
MAX_HOISTED = 4


def fuse_conv_chains(schedule: Schedule) -> Schedule:
    """``schedule`` with each convolution chain (see the module docstring) as one
    :class:`ConvChain` step (the schedule is changed in place and returned)."""
    original = schedule.steps
    steps = schedule.steps = _hoisted(original)
    returned = {buf for buf, _ in schedule.outputs}
    readers: dict[int, list[int]] = {}
    for index, step in enumerate(steps):
        for buf in step.reads():
            readers.setdefault(buf, []).append(index)
    out: list[Step] = []
    index = 0
    while index < len(steps):
        chain = _match(schedule, index, readers, returned)
        if chain is None:
            out.append(steps[index])
            index += 1
            continue
        out.append(chain)
        index += 2 if chain.pool is None else 3
    if len(out) != len(steps):
        schedule.steps = out
        schedule.producer = {buf: i for i, step in enumerate(out) for buf in step.writes()}
    else:
        schedule.steps = original  # no chain: the order stays as scheduled
    return schedule


def _hoisted(steps: list[Step]) -> list[Step]:
    """``steps`` with the kernels that sit between a convolution and the kernel reading
    its output, and are independent of the convolution, moved before it (at most
    :data:`MAX_HOISTED` each). An unfolded inference batch norm schedules its
    per-channel scale and shift (``gamma * rsqrt(var + eps)``, ...) there, which would
    keep the normalization, the activation and the pooling out of the chain."""
    out = list(steps)
    for index in range(len(out)):
        conv = out[index]
        if not (isinstance(conv, Library) and conv.node.op == "conv"):
            continue
        reads, writes = conv.reads(), conv.writes()
        end = index + 1
        while (
            end < len(out)
            and end - index <= MAX_HOISTED
            and isinstance(out[end], Kernel)
            and not (out[end].reads() & writes)
            and not (out[end].writes() & (reads | writes))
        ):
            end += 1
        if end > index + 1 and end < len(out) and isinstance(out[end], Kernel) and out[end].reads() & writes:
            out[index:end] = out[index + 1 : end] + [conv]
    return out


def _match(schedule: Schedule, index: int, readers: dict[int, list[int]], returned: set[int]) -> ConvChain | None:
    steps = schedule.steps
    conv = steps[index]
    if not (isinstance(conv, Library) and conv.node.op == "conv") or index + 1 >= len(steps):
        return None
    epilogue = steps[index + 1]
    (out,) = conv.outs
    avals = schedule.graph.avals
    shape = avals[conv.node.outs[0]].shape
    if (
        not isinstance(epilogue, Kernel)
        or epilogue.dim is not None
        or epilogue.reductions
        or size_of(epilogue.space) != size_of(shape)
        or size_of(shape) == 0
        or out not in epilogue.reads()
        or any(s.reduced for s in epilogue.stores)
    ):
        return None
    bias_ref = conv.node.args[2]
    bias = None if bias_ref is None else conv.args[bias_ref]
    split = _Split(shape, out, bias, avals[conv.node.outs[0]].dtype)
    stores = []
    for s in epilogue.stores:
        expr = split.expr(s.expr)
        if expr is None or not split.shift(s.buffer, size_of(shape[1:])):
            return None
        stores.append(Store(s.buffer, expr, False))
    sample = Kernel(shape[1:], None, [], stores)
    local = set()
    if out not in returned and all(r == index + 1 for r in readers.get(out, ())):
        local.add(out)
    elif bias is not None:  # later steps read the convolution's output: stored with its bias
        sample.stores.append(Store(out, split.value(), False))
    after = steps[index + 2] if index + 2 < len(steps) else None
    pool = after if isinstance(after, Library) and _pools(after, epilogue, shape, avals) else None
    if pool is not None:
        (source,) = pool.reads()
        if source not in returned and all(r == index + 2 for r in readers.get(source, ())):
            local.add(source)
    return ConvChain(conv, epilogue, sample, split.shifts, pool, frozenset(local))


def _pools(step: Library, epilogue: Kernel, shape: tuple[int, ...], avals: list) -> bool:
    """Whether ``step`` max-pools a value the epilogue stores, with the same samples."""
    if step.node.op not in ("max_pool", "max_pool_with_indices"):
        return False
    x = step.node.args[0]
    ((buf, view),) = step.args.values()
    x_shape = avals[x].shape
    return (
        buf in epilogue.writes()
        and view.offset == 0
        and view.is_contiguous()
        and len(x_shape) >= 2
        and x_shape[0] == shape[0]
        and size_of(x_shape) == size_of(shape)
    )


class _Split:
    """The epilogue's expressions re-expressed over one sample (see :class:`ConvChain`)."""

    def __init__(self, shape: tuple[int, ...], out: int, bias: tuple[int, View] | None, dtype: np.dtype) -> None:
        self.shape = shape
        self.out = out
        self.bias = bias
        self.dtype = dtype
        self.x = Exprs()
        self.shifts: dict[int, int] = {}
        self.memo: dict[int, Expr | None] = {}
        self.dense = View.contiguous(shape).normalized()

    def shift(self, buf: int, stride: int) -> bool:
        """Records ``buf``'s stride along the sample dim; ``False`` if it has another."""
        if self.shape[0] == 1:
            stride = 0
        return self.shifts.setdefault(buf, stride) == stride

    def expr(self, expr: Expr) -> Expr | None:
        return self.x.map_loads(expr, self.load, self.memo)

    def load(self, load: Expr) -> Expr | None:
        x = self.x
        view = load.args[0]
        if load.kind != "load":  # a draw's element: its number is not the sample's
            return None
        if view.shape == ():  # one element (loop-invariant): not of the convolution's output
            return load if load.op != self.out and self.shift(load.op, 0) else None
        view = view.reshape(self.shape)
        if view is None:
            return None
        inner = View(self.shape[1:], view.strides[1:], view.offset)
        if load.op != self.out:
            return x.load(load.op, inner, load.dtype) if self.shift(load.op, view.strides[0]) else None
        if (
            view.normalized() != self.dense
            or load.dtype != self.dtype
            or not self.shift(self.out, size_of(self.shape[1:]))
            or (self.bias is not None and not self.shift(self.bias[0], 0))
        ):
            return None
        return self.value()

    def value(self) -> Expr:
        """The convolution's output at a point of the sample: the ``?gemm``'s result
        plus the bias (in the order the convolution adds them)."""
        x = self.x
        raw = x.load(self.out, View.contiguous(self.shape[1:]), self.dtype)
        if self.bias is None:
            return raw
        buf, view = self.bias
        strides = (view.strides[0],) + (0,) * (len(self.shape) - 2)
        bias = x.load(buf, View(self.shape[1:], strides, view.offset), self.dtype)
        return x.make("binary", BinaryOp.ADD, (raw, bias), self.dtype)


__all__ = ["fuse_conv_chains"]
