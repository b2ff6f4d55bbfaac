"""``DataParallel``: data-parallel training over the world's ranks (Burn's
distributed data parallel; PyTorch's ``DistributedDataParallel``).

Every rank holds the whole model and trains on its own shard of each batch; after
backward the gradients are averaged over the ranks, so every rank takes the same
optimizer step and the parameters stay identical.

Hand-written loop::

    dp = DataParallel(model)          # checks that the ranks agree, copies rank 0's parameters
    model = dp.model
    for batch in loader:              # a loader with a DistributedSampler
        loss = model.loss(batch)
        grads = dp.backward(loss, model)              # backward + bucketed all-reduce, overlapped
        # or: grads = dp.sync_grads(GradientsParams.from_grads(loss.backward(), model))
        model = optim.step(lr, model, grads)

With the Learner: ``Learner(model, optim, lr, strategy=DataParallel())``.
"""

from __future__ import annotations

import zlib
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.autodiff.hooks import leaf_grad_hook
from ember.distributed.bucket import BucketPlan, GradSync
from ember.distributed.communicator import Communicator
from ember.distributed.staging import host_to_device, to_host
from ember.distributed.world import communicator as world_communicator
from ember.errors import ConfigError, DistributedError
from ember.module import Module, Param
from ember.module.param import RunningState
from ember.optim import GradientsParams

if TYPE_CHECKING:
    from ember.distributed.compiled_step import CompiledStep

DEFAULT_BUCKET_MB = 25.0


def _signature(model: Module) -> list[tuple[str, list[int], str, bool]]:
    return [(path, list(p.shape), str(p.dtype), bool(p.require_grad)) for path, p in model.named_params()]


def _trainable(model: Module) -> list[tuple[str, Param]]:
    return [(path, p) for path, p in model.named_params() if p.require_grad and p.dtype.is_float]


def check_models_match(model: Module, comm: Communicator) -> None:
    """Raises :class:`DistributedError` on every rank when the ranks' models differ in
    structure (parameter paths), parameter count, shapes or dtypes."""
    if comm.size == 1:
        return
    signature = _signature(model)
    key = zlib.crc32(repr((type(model).__name__, signature)).encode())
    keys = comm.all_gather(np.array([key], dtype=np.int64)).reshape(-1)
    if np.all(keys == keys[0]):
        return
    everyone = comm.all_gather_object((type(model).__name__, signature))
    raise DistributedError(_mismatch_message(everyone))


def _mismatch_message(everyone: list[tuple[str, list]]) -> str:
    name0, sig0 = everyone[0]
    problems = []
    for r, (name, sig) in enumerate(everyone[1:], start=1):
        if name != name0:
            problems.append(f"rank {r} has a {name}, rank 0 a {name0}")
            continue
        count0 = sum(int(np.prod(s)) for _, s, _, _ in sig0)
        count = sum(int(np.prod(s)) for _, s, _, _ in sig)
        if len(sig) != len(sig0) or count != count0:
            problems.append(f"rank {r} has {len(sig)} parameters ({count} values), rank 0 has {len(sig0)} ({count0})")
        paths0 = {p: rest for p, *rest in sig0}
        for path, shape, dtype, grad in sig:
            if path not in paths0:
                problems.append(f"rank {r} has a parameter {path!r} that rank 0 lacks")
            elif paths0[path] != [shape, dtype, grad]:
                s0, d0, g0 = paths0[path]
                problems.append(
                    f"{path!r} is {dtype} {shape}{'' if grad else ' (frozen)'} on rank {r} but "
                    f"{d0} {s0}{'' if g0 else ' (frozen)'} on rank 0"
                )
        missing = [p for p in paths0 if p not in {q for q, *_ in sig}]
        if missing:
            problems.append(f"rank {r} lacks {', '.join(map(repr, missing[:3]))}{' ...' if len(missing) > 3 else ''}")
    listed = "; ".join(problems[:6]) + (" ..." if len(problems) > 6 else "")
    return (
        f"ember.distributed: the ranks' models differ: {listed}. Every rank must build the same model "
        "(same structure, parameter count, shapes and dtypes) before data-parallel training"
    )


class DataParallel:
    """Data-parallel training over the world's ranks (or ``communicator``).

    ``DataParallel(model)`` checks that every rank built the same model (structure,
    parameter count, shapes, dtypes: a clear error otherwise) and copies rank 0's
    parameter values and ids to every rank; ``dp.model`` is the result. Gradients
    are reduced in flat buckets of about ``bucket_cap_mb`` megabytes with
    non-blocking all-reduces; :meth:`backward` starts each bucket as soon as backward
    has finished its gradients (``overlap``). ``reduce`` is ``"mean"`` (the default:
    with a mean loss, N ranks on batches of ``b`` equal one process on ``N * b``) or
    ``"sum"``.

    As a Learner strategy (``strategy=DataParallel()``, no model needed) it also
    shards the loaders, reduces the metrics over ranks and lets rank 0 alone write
    logs, dashboards and checkpoints.
    """

    def __init__(
        self,
        model: Module | None = None,
        *,
        bucket_cap_mb: float = DEFAULT_BUCKET_MB,
        reduce: str = "mean",
        overlap: bool = True,
        communicator: Communicator | None = None,
    ):
        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) or not bucket_cap_mb > 0:
            raise ConfigError(
                f"ember.distributed.DataParallel: bucket_cap_mb must be a number > 0, got {bucket_cap_mb!r}"
            )
        if reduce not in ("mean", "sum"):
            raise ConfigError(f"ember.distributed.DataParallel: reduce must be 'mean' or 'sum', got {reduce!r}")
        self.bucket_cap_mb = float(bucket_cap_mb)
        self.reduce = reduce
        self.overlap = bool(overlap)
        self._comm = communicator
        self._plan: BucketPlan | None = None
        self._plan_key: Any = None
        self.model: Module | None = None
        if model is not None:
            self.model = self.prepare(model)

    # ------------------------------------------------------------------ world
    @property
    def comm(self) -> Communicator:
        if self._comm is None:
            self._comm = world_communicator()
        return self._comm

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def world_size(self) -> int:
        return self.comm.size

    def is_main(self) -> bool:
        return self.comm.rank == 0

    # ------------------------------------------------------------------ start
    def prepare(self, model: Module) -> Module:
        """``model`` with rank 0's parameter values, ids and running states, after
        checking that every rank's model has the same structure."""
        if not isinstance(model, Module):
            raise ConfigError(f"ember.distributed.DataParallel: expected a Module, got {type(model).__name__}")
        comm = self.comm
        check_models_match(model, comm)
        if comm.size > 1:
            model = broadcast_module(model, comm, root=0)
        self._plan_for(model)
        return model

    def _plan_for(self, model: Module, params: list[tuple[str, Param]] | None = None) -> BucketPlan:
        """The buckets for ``model`` (whose ``_trainable`` list ``params`` is, when given)."""
        if params is None:
            params = _trainable(model)
        key = tuple((p.id, path, tuple(p.shape), p.dtype) for path, p in params)
        if self._plan is None or key != self._plan_key:
            if self._plan is not None and self.comm.size > 1:
                check_models_match(model, self.comm)  # the trainable set changed: the ranks must agree again
            entries = [(int(p.id), path, tuple(p.shape), p.dtype.np) for path, p in params]
            self._plan = BucketPlan(entries, int(self.bucket_cap_mb * 1e6))
            self._plan_key = key
        return self._plan

    # ------------------------------------------------------------------ gradients
    def sync_grads(self, grads: GradientsParams, model: Module | None = None) -> GradientsParams:
        """The gradients averaged (or summed) over every rank, bucketed. ``model`` (default:
        the one given at construction, or the parameters the gradients came from)
        fixes the buckets."""
        if not isinstance(grads, GradientsParams):
            raise ConfigError(
                f"ember.distributed.DataParallel.sync_grads: expected GradientsParams "
                f"(GradientsParams.from_grads(loss.backward(), model)), got {type(grads).__name__}"
            )
        if self.comm.size == 1:
            return grads
        session = self.begin(self._model_for(model))
        return session.finish(grads)

    def backward(self, loss: Any, model: Module) -> GradientsParams:
        """``loss.backward()`` with each gradient bucket's all-reduce started as soon as
        its gradients are final; the reduced ``GradientsParams`` of ``model``."""
        if self.comm.size == 1:
            return GradientsParams.from_grads(loss.backward(), model)
        session = self.begin(model)
        with session.hook():
            grads = loss.backward()
        return session.finish(GradientsParams.from_grads(grads, model))

    def compile(self, loss_fn: Any, optim: Any, *, max_traces: int = 8, shard_optimizer: bool = False) -> CompiledStep:
        """A compiled data-parallel step, ``step(model, lr, *batch) -> (model, loss)``:
        forward and backward as one ``ember.compile`` graph, the gradients all-reduced,
        the optimizer update as a second graph (see :mod:`ember.distributed.compiled_step`).
        ``loss_fn(model, *batch)`` returns the scalar loss. ``shard_optimizer=True``
        splits the update over the ranks (ZeRO stage 1; element-wise optimizers only).

        >>> step = dp.compile(lambda m, x, y: ce.forward(m(x), y), AdamConfig().init())  # doctest: +SKIP
        >>> model, loss = step(model, 1e-3, x, y)                                          # doctest: +SKIP
        """
        from ember.distributed.compiled_step import CompiledStep

        return CompiledStep(self, loss_fn, optim, max_traces=max_traces, shard_optimizer=shard_optimizer)

    def begin(self, model: Module) -> GradSession:
        """A step's reduction; run backward inside ``session.hook()`` to overlap, then
        ``session.finish(grads)``."""
        return GradSession(self, model)

    def _model_for(self, model: Module | None) -> Module:
        model = model if model is not None else self.model
        if model is None:
            raise ConfigError(
                "ember.distributed.DataParallel.sync_grads: no model to take the buckets from; build DataParallel(model) "
                "or pass sync_grads(grads, model)"
            )
        return model

    # ------------------------------------------------------------------ checks
    def assert_in_sync(self, model: Module) -> None:
        """Raises :class:`DistributedError` unless every rank holds bit-identical
        parameter values (a debugging aid: one small all-gather of checksums)."""
        comm = self.comm
        if comm.size == 1:
            return
        digest = 0
        for _, p in model.named_params():
            digest = zlib.crc32(np.ascontiguousarray(to_host(p.val())).view(np.uint8).data, digest)
        digests = comm.all_gather(np.array([digest], dtype=np.int64)).reshape(-1)
        if not np.all(digests == digests[0]):
            listed = ", ".join(f"rank {r}: {int(d):08x}" for r, d in enumerate(digests))
            raise DistributedError(f"ember.distributed: the ranks' parameters are no longer identical ({listed})")

    def __repr__(self) -> str:
        return (
            f"DataParallel(rank={self.rank}, world_size={self.world_size}, bucket_cap_mb={self.bucket_cap_mb:g}, "
            f"reduce={self.reduce!r}, overlap={self.overlap})"
        )


class GradSession:
    """One training step's gradient reduction (see :meth:`DataParallel.begin`)."""

    def __init__(self, dp: DataParallel, model: Module):
        self.dp = dp
        self.comm = dp.comm
        self.active = self.comm.size > 1
        if not self.active:
            return
        trainable = _trainable(model)
        plan = dp._plan_for(model, trainable)
        self.sync = GradSync(plan, self.comm, dp.reduce == "mean")
        self.params: dict[int, tuple[Param, str]] = {}
        self.by_node: dict[int, int] = {}
        for path, p in trainable:
            self.params[int(p.id)] = (p, path)
            node = getattr(p.val().primitive, "node", None)
            if node is not None:
                self.by_node[node.id] = int(p.id)

    def hook(self) -> Any:
        """A context in which backward hands each final gradient to its bucket."""
        if not self.active or not self.dp.overlap:
            return nullcontext()
        return leaf_grad_hook(self._on_grad)

    def _on_grad(self, node_id: int, grad: Any) -> None:
        param_id = self.by_node.get(node_id)
        if param_id is None:
            return
        param = self.params[param_id][0]
        inner = param.device.inner()
        self.sync.put(param_id, inner._backend.to_numpy(grad))

    def finish(self, grads: GradientsParams) -> GradientsParams:
        """The reduced gradients (the ones given, for parameters outside the buckets)."""
        if not self.active:
            return grads
        sync = self.sync
        for param_id, grad in grads.items():
            if not sync.has(int(param_id)):  # the hook put most of them already
                sync.put(int(param_id), to_host(grad))
        reduced = sync.finish()
        out = GradientsParams()
        for param_id, grad in grads.items():
            if int(param_id) not in sync.plan.where:
                out._grads[param_id] = grad
                if param_id in grads._sources:
                    out._sources[param_id] = grads._sources[param_id]
        for key, array in reduced.items():
            entry = self.params.get(key)
            if entry is None:
                continue
            param, path = entry
            pid = param.id
            out._grads[pid] = host_to_device(array, param.device.inner(), param.dtype.np)
            out._sources[pid] = (param, path)
        return out


def broadcast_module(model: Module, comm: Communicator, root: int = 0) -> Module:
    """``model`` with ``root``'s parameter values, ids and running states on every rank."""
    params = model.named_params()
    states = model.named_states()
    ids = comm.broadcast_object([int(p.id) for _, p in params] + [int(s.id) for _, s in states], root)
    # One flat buffer per wire dtype, in field order.
    arrays = [to_host(p.val()) for _, p in params] + [to_host(s.value()) for _, s in states]
    groups: dict[np.dtype, list[int]] = {}
    for i, a in enumerate(arrays):
        groups.setdefault(a.dtype, []).append(i)
    received: list[np.ndarray | None] = [None] * len(arrays)
    for dtype in sorted(groups, key=str):
        members = groups[dtype]
        flat = np.concatenate([arrays[i].reshape(-1) for i in members]) if members else np.zeros(0, dtype)
        flat = comm.broadcast(flat, root)
        offset = 0
        for i in members:
            n = arrays[i].size
            received[i] = flat[offset : offset + n].reshape(arrays[i].shape)
            offset += n
    values = [a for a in received if a is not None]
    assert len(values) == len(arrays)  # every array is in one dtype group
    new_params: dict[int, Param] = {}
    for k, (_, p) in enumerate(params):
        value = host_to_device(values[k], p.device.inner(), p.dtype.np)
        new_params[id(p)] = Param.from_inner_value(type(p.id)(ids[k]), value, p.device, p.require_grad)
    new_states: dict[int, RunningState] = {}
    for k, (_, s) in enumerate(states):
        value = s.value()
        array = values[len(params) + k]
        new_states[id(s)] = RunningState(
            host_to_device(array, value.device, value.primitive.dtype), type(s.id)(ids[len(params) + k])
        )
    from ember.module.visitor import FnMapper

    return model.map(FnMapper(lambda p, path: new_params.get(id(p), p), lambda s, path: new_states.get(id(s), s)))
