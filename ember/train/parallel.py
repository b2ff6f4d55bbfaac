"""How a training run spreads over ranks: :class:`SingleDevice` (one process) or a
``DataParallel`` strategy from ``ember.distributed`` (Burn's ``LearningStrategy``:
``SingleDevice`` and ``DistributedDataParallel``).

With data parallelism every rank runs the same loop on its own shard of the data:
the loaders are sharded (a ``DistributedSampler`` is added when a loader has no
sampler), gradients are averaged over ranks after each backward, metrics are
merged over ranks at the end of each epoch (so history, early stopping and the
choice of checkpoints agree everywhere), and only rank 0 writes the logs,
dashboard, plots, summary and checkpoints, which every rank resumes from.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ember.data import DataLoader
from ember.errors import ConfigError, DistributedError
from ember.module import Module
from ember.optim import GradientsParams
from ember.train.metrics_group import MetricGroup


class SingleDevice:
    """One process trains (the default strategy)."""

    world_size = 1
    rank = 0
    is_main = True

    def prepare_model(self, model: Module) -> Module:
        return model

    def shard(self, loader: DataLoader, train: bool) -> DataLoader:
        return loader

    def train_step(self, learner: Any, model: Module, batch: Any) -> Any:
        return learner.train_step(model, batch)

    def sync_grads(self, grads: GradientsParams, model: Module) -> GradientsParams:
        return grads

    def agree(self, flag: bool) -> bool:
        return flag

    def broadcast(self, obj: Any) -> Any:
        return obj

    def merged_states(self, group: MetricGroup) -> dict[str, Any]:
        return group.state_dict()

    def epoch_values(self, group: MetricGroup) -> dict[str, float]:
        return group.epoch_values()

    def __repr__(self) -> str:
        return "SingleDevice()"


class DataParallelRun:
    """A ``DataParallel`` strategy as the training loop uses it."""

    def __init__(self, dp: Any):
        self.dp = dp
        self.comm = dp.comm
        self.world_size = self.comm.size
        self.rank = self.comm.rank
        self.is_main = self.rank == 0

    def prepare_model(self, model: Module) -> Module:
        return self.dp.prepare(model)

    def shard(self, loader: DataLoader, train: bool) -> DataLoader:
        """The loader with this rank's shard: a ``DistributedSampler`` seeded like the
        loader's shuffle (padded for training, so every rank runs the same number of
        steps; uneven for validation, so every item counts once)."""
        from ember.distributed import DistributedSampler

        if loader.sampler is None and self.world_size > 1:
            seed = loader.shuffle_seed
            sampler = DistributedSampler(
                self.world_size, self.rank, shuffle=seed is not None, seed=seed or 0, pad=train
            )
            loader = loader.with_sampler(sampler)
        if train and self.world_size > 1:
            counts = self.comm.all_gather(np.array([len(loader)], dtype=np.int64)).reshape(-1)
            if not np.all(counts == counts[0]):
                listed = ", ".join(f"rank {r}: {int(c)}" for r, c in enumerate(counts))
                raise DistributedError(
                    f"ember: Learner.fit: the ranks' training loaders have different numbers of batches ({listed}); "
                    "every rank must run the same number of steps: use DistributedSampler() (pads) or "
                    "DistributedSampler(drop_last=True), and the same batch size everywhere"
                )
        return loader

    def train_step(self, learner: Any, model: Module, batch: Any) -> Any:
        """The learner's step with its gradients averaged over ranks (each bucket's
        reduction starts while backward still runs)."""
        from ember.train.output import TrainOutput

        if self.world_size == 1:
            return learner.train_step(model, batch)
        # The overlapped reductions read each gradient as backward produces it, which a
        # trace cannot hold: compile="auto" runs this step eagerly (compile=True tries,
        # and falls back after a CompileWarning).
        compiled = learner.compiled
        step = learner.eager_train_step if compiled is not None and compiled.auto else learner.train_step
        session = self.dp.begin(model)
        with session.hook():
            out = step(model, batch)
        return TrainOutput(session.finish(out.grads), out.item)

    def sync_grads(self, grads: GradientsParams, model: Module) -> GradientsParams:
        return self.dp.sync_grads(grads, model)

    def agree(self, flag: bool) -> bool:
        """True on every rank when it is true on any (e.g. a stop request)."""
        if self.world_size == 1:
            return flag
        from ember.distributed import ReduceOp

        return bool(self.comm.all_reduce(np.array([1 if flag else 0], dtype=np.uint8), ReduceOp.MAX)[0])

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's object on every rank."""
        return obj if self.world_size == 1 else self.comm.broadcast_object(obj, 0)

    def merged_states(self, group: MetricGroup) -> dict[str, Any]:
        """The group's metric states merged over ranks (the same on every rank)."""
        states = group.state_dict()
        if self.world_size == 1:
            return states
        everyone = self.comm.all_gather_object(states)
        return {m.name: m.merge_states([s[m.name] for s in everyone]) for m in group.metrics}

    def epoch_values(self, group: MetricGroup) -> dict[str, float]:
        """The epoch values over every rank's items."""
        if self.world_size == 1:
            return group.epoch_values()
        merged = self.merged_states(group)
        values = {}
        for m in group.metrics:
            if merged.get(m.name):
                total = copy.deepcopy(m)
                total.load_state_dict(merged[m.name])
                values[m.name] = float(total.value())
            else:  # a metric without state (speed, memory) keeps this rank's value
                values[m.name] = float(m.value())
        return values

    def __repr__(self) -> str:
        return f"DataParallelRun(rank={self.rank}, world_size={self.world_size})"


def make_strategy(strategy: Any) -> SingleDevice | DataParallelRun:
    if strategy is None or isinstance(strategy, SingleDevice):
        return SingleDevice()
    if all(callable(getattr(strategy, name, None)) for name in ("prepare", "begin", "sync_grads")):
        return DataParallelRun(strategy)
    raise ConfigError(
        "ember: learning strategy must be SingleDevice() or ember.distributed.DataParallel(), "
        f"got {type(strategy).__name__}"
    )
