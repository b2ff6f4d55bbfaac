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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.distributed.bucket import BucketPlan, GradSync
from ember.distributed.staging import host_to_device, to_host
from ember.errors import ConfigError
from ember.module import Module, Param
from ember.optim import GradientsParams
from ember.tensor import Tensor

if TYPE_CHECKING:
    from ember.distributed.data_parallel import DataParallel


class CompiledStep:
    """``step(model, lr, *batch) -> (model, loss)``: one data-parallel training step
    (see the module docstring). ``loss_fn(model, *batch)`` returns the scalar loss;
    ``optim`` is a module optimizer (``AdamConfig().init()``, ...)."""

    def __init__(self, dp: DataParallel, loss_fn: Callable[..., Tensor], optim: Any, *, max_traces: int = 8):
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

    # ------------------------------------------------------------------ a step
    def __call__(self, model: Module, lr: float, *batch: Any) -> tuple[Module, Tensor]:
        if not isinstance(model, Module):
            raise ConfigError(f"ember.distributed.DataParallel.compile: expected a Module, got {type(model).__name__}")
        loss, grads = self._grads(model, *batch)
        if self.dp.comm.size > 1:
            grads = self._reduce(model, grads)
        return self._update(model, float(lr), grads), loss

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
