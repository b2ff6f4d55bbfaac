"""``DataParallel.compile``: a data-parallel training step run as compiled graphs.

``ember.compile`` replays a whole training step without Python per op, but the
gradient all-reduce happens between backward and the optimizer update, outside any
graph. :class:`CompiledStep` therefore compiles the step as two graphs with the
all-reduce between them:

1. forward and backward (``loss_fn(model, *batch)`` and its gradients), one graph;
2. the gradients, reduced over the ranks in :class:`~ember.distributed.GradSync`'s
   buckets (a ring all-reduce for large buckets; see :mod:`ember.distributed.ring`);
3. the optimizer update, a second graph (the parameters and moments updated in
   place, as ``ember.compile`` does).

In a one-rank world step 2 is skipped; the rest is the same code, so a 1-rank and an
N-rank run compare like with like. The results are those of the eager
``DataParallel.backward`` loop (the same gradients, the same reduction).

``shard_optimizer=True`` shards the update over the ranks (ZeRO stage 1): the
gradients are packed into one flat vector and reduce-scattered, each rank updates
only its block of the flat parameters (and keeps only that block's optimizer state),
and the updated blocks are all-gathered. Each rank then does ``1/N`` of the update's
work and holds ``1/N`` of the moments; the traffic is that of one all-reduce. In a
one-rank world there is nothing to shard: the step is the unsharded one. It
needs an element-wise optimizer (SGD, momentum, Adam, AdamW, RMSprop: one whose update
of an element reads only that element's parameter, gradient and state; not one that
clips by a norm or scales by a tensor's norm), one float dtype for every trainable
parameter, and a gradient for each of them. The returned model's parameters are views
of the flat vector, updated in place by the next step (as ``ember.compile`` donates
parameters); ``optim`` holds the state of this rank's block only (a flat parameter of
its own), so it does not carry over to another world size.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ember.distributed.bucket import BucketPlan, GradSync
from ember.distributed.communicator import ReduceOp
from ember.distributed.staging import divide_in_place, host_to_device, to_host
from ember.errors import ConfigError
from ember.module import Module, Param, ParamId
from ember.optim import GradientsParams
from ember.tensor import Tensor

if TYPE_CHECKING:
    from ember.distributed.data_parallel import DataParallel


class _Shard(Module):
    """This rank's block of the flat parameter vector, as a module an optimizer updates."""

    flat: Param


class CompiledStep:
    """``step(model, lr, *batch) -> (model, loss)``: one data-parallel training step
    (see the module docstring). ``loss_fn(model, *batch)`` returns the scalar loss;
    ``optim`` is a module optimizer (``AdamConfig().init()``, ...)."""

    def __init__(
        self,
        dp: DataParallel,
        loss_fn: Callable[..., Tensor],
        optim: Any,
        *,
        max_traces: int = 8,
        shard_optimizer: bool = False,
    ):
        if not callable(loss_fn):
            raise ConfigError(f"ember.distributed.DataParallel.compile: loss_fn must be callable, got {loss_fn!r}")
        if not callable(getattr(optim, "step", None)):
            raise ConfigError(
                "ember.distributed.DataParallel.compile: optim must be a module optimizer with step(lr, model, grads) "
                f"(e.g. AdamConfig().init()), got {type(optim).__name__}"
            )
        from ember.capture import compile as compile_fn

        self.dp = dp
        self.loss_fn = loss_fn
        self.optim = optim
        self._grads = compile_fn(self._forward_backward, max_traces=max_traces)
        self._update = compile_fn(self._apply, max_traces=max_traces)
        self._model: Module | None = None  # the model the layout below is for (a compiled
        self._layout: list[tuple[int, Param]] = []  # update returns the same one each step)
        self._plan: BucketPlan | None = None
        self.shard_optimizer = bool(shard_optimizer)
        if self.shard_optimizer:
            self._update_shard = compile_fn(self._apply_shard, max_traces=max_traces)
        self._flat: np.ndarray | None = None  # sharded: the flat parameters (padded to N blocks)
        self._flat_grads: np.ndarray | None = None
        self._offsets: list[tuple[int, int]] = []
        self._shard: _Shard | None = None
        # Set to a dict to add up each part's seconds per step (benchmarks): "forward_backward"
        # (the first graph), "communication" (packing the gradients, the all-reduce or the
        # reduce-scatter and all-gather, waiting for the other ranks) and "update".
        self.timings: dict[str, float] | None = None

    # ------------------------------------------------------------------ the two graphs
    def _forward_backward(self, model: Module, *batch: Any) -> tuple[Tensor, list[Tensor | None]]:
        from ember.distributed.data_parallel import _trainable

        loss = self.loss_fn(model, *batch)
        grads = GradientsParams.from_grads(loss.backward(), model)
        return loss, [grads.get(p.id) for _, p in _trainable(model)]

    def _apply(self, model: Module, lr: float, grads: list[Tensor | None]) -> Module:
        from ember.distributed.data_parallel import _trainable

        params = GradientsParams()
        for (path, p), grad in zip(_trainable(model), grads, strict=True):
            if grad is not None:
                params._grads[p.id] = grad
                params._sources[p.id] = (p, path)
        return self.optim.step(lr, model, params)

    def _apply_shard(self, shard: _Shard, lr: float, grad: Tensor) -> Module:
        params = GradientsParams()
        flat = shard.flat
        params._grads[flat.id] = grad
        params._sources[flat.id] = (flat, "flat")
        return self.optim.step(lr, shard, params)

    # ------------------------------------------------------------------ a step
    def __call__(self, model: Module, lr: float, *batch: Any) -> tuple[Module, Tensor]:
        if not isinstance(model, Module):
            raise ConfigError(f"ember.distributed.DataParallel.compile: expected a Module, got {type(model).__name__}")
        if self.shard_optimizer and self.dp.comm.size > 1:
            return self._sharded_step(model, float(lr), batch)
        t0 = perf_counter()
        loss, grads = self._grads(model, *batch)
        t1 = perf_counter()
        if self.dp.comm.size > 1:
            grads = self._reduce(model, grads)
        t2 = perf_counter()
        model = self._update(model, float(lr), grads)
        if self.timings is not None:
            self._record(t1 - t0, t2 - t1, perf_counter() - t2)
        return model, loss

    def _record(self, forward_backward: float, communication: float, update: float) -> None:
        timings = self.timings
        assert timings is not None
        for name, seconds in (
            ("forward_backward", forward_backward),
            ("communication", communication),
            ("update", update),
        ):
            timings[name] = timings.get(name, 0.0) + seconds

    def _reduce(self, model: Module, grads: list[Tensor | None]) -> list[Tensor | None]:
        from ember.distributed.data_parallel import _trainable

        dp = self.dp
        if model is not self._model:
            trainable = _trainable(model)
            self._layout = [(int(p.id), p) for _, p in trainable]
            self._plan = dp._plan_for(model, trainable)
            self._model = model
        assert self._plan is not None
        sync = GradSync(self._plan, dp.comm, dp.reduce == "mean")
        for (key, _), grad in zip(self._layout, grads, strict=True):
            if grad is not None:
                sync.put(key, to_host(grad))
        reduced = sync.finish()
        out: list[Tensor | None] = []
        for (key, p), grad in zip(self._layout, grads, strict=True):
            array = reduced.get(key)
            if array is None:
                out.append(None)
            else:
                like = grad if grad is not None else p.val()
                out.append(host_to_device(array, like.device.inner(), p.dtype.np))
        return out

    # ------------------------------------------------------------------ sharded update
    def _adopt(self, model: Module) -> Module:
        """``model`` with its trainable parameters moved into one flat vector (each a
        view of it); this rank's block of it becomes the shard the optimizer updates."""
        from ember.distributed.data_parallel import _trainable
        from ember.module.visitor import FnMapper

        trainable = _trainable(model)
        dtypes = {p.dtype.np for _, p in trainable}
        if len(dtypes) != 1:
            raise ConfigError(
                "ember.distributed.DataParallel.compile(shard_optimizer=True): the trainable parameters must share one "
                f"float dtype, got {sorted(str(d) for d in dtypes) or 'none'}; cast the model or leave the optimizer "
                "unsharded"
            )
        dtype = dtypes.pop()
        comm = self.dp.comm
        sizes = [int(np.prod(p.shape, dtype=np.int64)) for _, p in trainable]
        total = sum(sizes)
        block = -(-total // comm.size)
        flat = np.zeros(block * comm.size, dtype=dtype)
        offsets, start = [], 0
        for size in sizes:
            offsets.append((start, start + size))
            start += size
        views: dict[int, Param] = {}
        for (a, b), (_, p) in zip(offsets, trainable, strict=True):
            flat[a:b] = to_host(p.val()).reshape(-1)
            value = host_to_device(flat[a:b].reshape(p.shape), p.device.inner(), dtype)
            views[id(p)] = Param.from_inner_value(p.id, value, p.device, p.require_grad)
        lo, hi = comm.rank * block, (comm.rank + 1) * block
        inner = trainable[0][1].device.inner() if trainable else model.devices()[0]
        shard = _Shard(
            flat=Param.from_inner_value(ParamId.new(), host_to_device(flat[lo:hi].copy(), inner, dtype), inner)
        )
        adopted = model.map(FnMapper(lambda p, path: views.get(id(p), p), lambda s, path: s))
        self._flat, self._flat_grads = flat, np.empty_like(flat)
        self._offsets, self._shard, self._block = offsets, shard, (lo, hi)
        self._layout = [(int(p.id), p) for _, p in trainable]
        self._model = adopted
        return adopted

    def _sharded_step(self, model: Module, lr: float, batch: tuple) -> tuple[Module, Tensor]:
        if model is not self._model:
            model = self._adopt(model)
        flat, grads_flat, comm = self._flat, self._flat_grads, self.dp.comm
        assert flat is not None and grads_flat is not None and self._shard is not None
        t0 = perf_counter()
        loss, grads = self._grads(model, *batch)
        t1 = perf_counter()
        for (a, b), (_, p), grad in zip(self._offsets, self._layout, grads, strict=True):
            if grad is None:
                raise ConfigError(
                    f"ember.distributed.DataParallel.compile(shard_optimizer=True): no gradient for a trainable "
                    f"parameter of shape {list(p.shape)}; every trainable parameter needs one (freeze it "
                    "otherwise), or leave the optimizer unsharded"
                )
            np.copyto(grads_flat[a:b], to_host(grad).reshape(-1), casting="unsafe")
        lo, hi = self._block
        mine = grads_flat[lo:hi]
        if comm.size > 1:
            grads_flat[self._offsets[-1][1] if self._offsets else 0 :] = 0  # the padding
            comm.reduce_scatter_in_place(grads_flat, ReduceOp.SUM)
            if self.dp.reduce == "mean":
                divide_in_place(mine, comm.size)
        shard = self._shard
        grad = host_to_device(mine, shard.flat.device.inner(), flat.dtype)
        t2 = perf_counter()
        shard = self._shard = cast(_Shard, self._update_shard(shard, lr, grad))
        t3 = perf_counter()
        np.copyto(flat[lo:hi], to_host(shard.flat.val()))
        if comm.size > 1:
            comm.all_gather_in_place(flat)
        if self.timings is not None:  # the gather after the update counts as communication
            self._record(t1 - t0, (t2 - t1) + (perf_counter() - t3), t3 - t2)
        return model, loss
