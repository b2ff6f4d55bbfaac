"""ember.distributed in one process (no MPI needed): the local world, the sampler,
buckets, the autodiff gradient hook, metric merging and the Learner strategy."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest

import ember.distributed as dist
from ember import Device, Tensor
from ember.backend.autodiff.hooks import leaf_grad_hook
from ember.data import ArrayDataset, DataLoaderBuilder, DefaultBatcher
from ember.data.dataset.shuffled import permutation
from ember.distributed import BucketPlan, DistributedSampler, GradSync, LocalCommunicator, ReduceOp
from ember.errors import ConfigError, DTypeError
from ember.optim import AdamConfig, GradientsParams
from ember.train import (
    AccuracyMetric,
    AurocMetric,
    Learner,
    LossMetric,
    PrecisionMetric,
    SingleDevice,
    SupervisedTraining,
)
from ember.train.metric.base import ItemView, MetricMetadata, Split
from tests.train.models import Classifier, cross_entropy, loaders


def test_the_world_without_mpiexec_has_one_rank():
    comm = dist.init()
    assert isinstance(comm, LocalCommunicator) and dist.communicator() is comm
    assert (dist.rank(), dist.world_size(), dist.is_main()) == (0, 1, True)
    dist.barrier()
    assert dist.all_gather_object({"a": 1}) == [{"a": 1}] and dist.broadcast_object([2]) == [2]


@pytest.mark.parametrize("name", ["flex", "flex+autodiff", "cube"])
def test_local_collectives_keep_values_device_and_dtype(name, rng):
    from tests.conftest import make_device

    device = make_device(name)
    x = Tensor.from_data(rng.normal(size=(4, 3)).astype(np.float32), device=device)
    for op in ("sum", "mean", "max", "min", ReduceOp.SUM):
        out = dist.all_reduce(x, op)
        assert out.device is device and out.dtype == x.dtype
        np.testing.assert_array_equal(out.to_numpy(), x.to_numpy())
    np.testing.assert_array_equal(dist.broadcast(x).to_numpy(), x.to_numpy())
    assert dist.all_gather(x, dim=1).dims() == [4, 3]
    assert dist.reduce_scatter(x, "mean").dims() == [4, 3]
    assert not dist.all_reduce(x).is_require_grad()


def test_collective_errors_name_the_problem():
    with pytest.raises(ConfigError, match="unknown reduce op 'prod'"):
        dist.all_reduce(Tensor.zeros([2]), "prod")
    with pytest.raises(DTypeError, match="'mean' needs a float tensor"):
        dist.all_reduce(Tensor.from_ints([1, 2]), "mean")
    with pytest.raises(ConfigError, match="expected a Tensor"):
        dist.all_reduce(np.zeros(2))
    with pytest.raises(ConfigError, match="dim must be in"):
        dist.all_gather(Tensor.zeros([2]), dim=3)
    with pytest.raises(ConfigError, match="root must be a rank"):
        dist.broadcast(Tensor.zeros([2]), root=1)
    with pytest.raises(ConfigError, match="backend must be 'mpi' or 'local'"):
        dist.world._world, saved = None, dist.world._world
        try:
            dist.init(backend="nccl")
        finally:
            dist.world._world = saved


def test_launcher_detection(monkeypatch):
    for name in (
        "PMI_RANK",
        "PMI_SIZE",
        "PMIX_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "MPI_LOCALNRANKS",
        "HYDI_CONTROL_FD",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_NPROCS",
    ):
        monkeypatch.delenv(name, raising=False)
    assert not dist.launched_by_mpi()
    monkeypatch.setenv("PMI_RANK", "0")
    assert dist.launched_by_mpi()
    monkeypatch.delenv("PMI_RANK")
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert dist.launched_by_mpi()
    monkeypatch.setenv("SLURM_NTASKS", "1")
    assert not dist.launched_by_mpi()


# ---------------------------------------------------------------------- sampler
@pytest.mark.parametrize("n_items,replicas", [(23, 2), (23, 3), (24, 4), (2, 3), (0, 2)])
def test_the_shards_deal_the_loader_order_in_turn(n_items, replicas):
    for drop_last in (False, True):
        samplers = [DistributedSampler(replicas, r, seed=9, drop_last=drop_last) for r in range(replicas)]
        for epoch in (0, 3):
            orders = [s.order(n_items, epoch) for s in samplers]
            assert [len(o) for o in orders] == [s.num_samples(n_items) for s in samplers]
            assert len({len(o) for o in orders}) <= 1  # padded or cut: every rank the same length
            dealt = [int(o[k]) for k in range(len(orders[0])) for o in orders] if orders[0].size else []
            perm = permutation(n_items, 9, epoch)
            if drop_last:
                assert dealt == perm[: n_items - n_items % replicas].tolist()
            else:
                total = -(-n_items // replicas) * replicas if n_items else 0
                assert dealt == np.resize(perm, total).tolist()
    even = [DistributedSampler(replicas, r, shuffle=False, pad=False) for r in range(replicas)]
    assert sorted(int(i) for s in even for i in s.order(n_items, 0)) == list(range(n_items))


def test_epochs_differ_and_repeat():
    s = DistributedSampler(2, 0, seed=1)
    assert s.order(50, 0).tolist() != s.order(50, 1).tolist()
    assert s.order(50, 1).tolist() == DistributedSampler(2, 0, seed=1).order(50, 1).tolist()


def test_sampler_arguments_are_checked():
    with pytest.raises(ConfigError, match="rank must be an int in"):
        DistributedSampler(2, 2)
    with pytest.raises(ConfigError, match="num_replicas"):
        DistributedSampler(0, 0)
    with pytest.raises(ConfigError, match="seed"):
        DistributedSampler(2, 0, seed=-1)
    assert DistributedSampler().num_replicas == 1  # the world's size


def test_a_loader_reads_its_shard():
    x, y = np.arange(10, dtype=np.float32)[:, None], np.arange(10)
    sampler = DistributedSampler(3, 1, shuffle=False)
    loader = (
        DataLoaderBuilder(DefaultBatcher())
        .batch_size(3)
        .sampler(sampler)
        .set_device(Device.flex())
        .build(ArrayDataset(x, y))
    )
    assert len(loader) == 2 and loader.num_items() == 4
    assert [b[1].tolist() for b in loader] == [[1, 4, 7], [0]]
    plain = DataLoaderBuilder(DefaultBatcher()).batch_size(3).shuffle(4).build(ArrayDataset(x, y))
    assert plain.with_sampler(sampler).shuffle_seed is None
    with pytest.raises(ConfigError, match="both decide the order"):
        DataLoaderBuilder(DefaultBatcher()).shuffle(1).sampler(sampler).build(ArrayDataset(x, y))
    with pytest.raises(ConfigError, match="expected a sampler"):
        DataLoaderBuilder(DefaultBatcher()).sampler([1, 2])


# ---------------------------------------------------------------------- buckets
def test_bucket_plan_cuts_by_size_and_dtype_in_backward_order():
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    entries = [(1, "a", (10,), f32), (2, "b", (300,), f32), (3, "c", (5,), f64), (4, "d", (20,), f32)]
    plan = BucketPlan(entries, cap_bytes=400)
    layout = [(b.dtype, [s.path for s in b.slots]) for b in plan.buckets]
    assert layout == [(f32, ["d"]), (f64, ["c"]), (f32, ["b"]), (f32, ["a"])]
    plan = BucketPlan(entries, cap_bytes=25_000_000)
    assert [[s.path for s in b.slots] for b in plan.buckets] == [["d", "b", "a"], ["c"]]
    assert plan.where[2][1].offset == 20
    half = BucketPlan([(1, "h", (4,), np.dtype(np.float16))], 100)
    assert half.buckets[0].dtype == f32  # float16 travels as float32


class TwinComm(LocalCommunicator):
    """Two ranks with the same gradients: every reduction doubles the buffer."""

    size = 2

    def all_reduce_start(self, buffer, op, detail=""):
        buffer *= 2
        return super().all_reduce_start(buffer, op)


def test_grad_sync_averages_and_keeps_absent_gradients_absent():
    f32 = np.dtype(np.float32)
    plan = BucketPlan([(1, "a", (2, 2), f32), (2, "b", (3,), f32), (3, "c", (1,), f32)], cap_bytes=16)
    assert [[s.path for s in b.slots] for b in plan.buckets] == [["c", "b"], ["a"]]
    sync = GradSync(plan, TwinComm(), mean=True)
    sync.put(2, np.ones(3, dtype=np.float64))  # cast to the bucket's dtype
    assert sync.requests[0] is None
    sync.put(3, np.array([2.5], dtype=np.float32))
    assert sync.requests[0] is not None  # the first bucket started as soon as it was full
    out = sync.finish()
    assert sorted(out) == [2, 3]  # no rank had a gradient for 1
    np.testing.assert_array_equal(out[2], np.ones(3))
    assert out[3].tolist() == [2.5]
    summed = GradSync(plan, TwinComm(), mean=False)
    summed.put(1, np.arange(4, dtype=np.float32).reshape(2, 2))
    assert summed.requests == [None, None]  # bucket 1 waits for bucket 0: every rank starts them in order
    out = summed.finish()
    assert sorted(out) == [1]
    np.testing.assert_array_equal(out[1], 2 * np.arange(4).reshape(2, 2))


def test_bucket_buffers_are_reused_once_no_gradient_view_is_alive():
    plan = BucketPlan([(1, "a", (4,), np.dtype(np.float32)), (2, "b", (3,), np.dtype(np.float64))], 1 << 20)
    first = [id(b) for b in plan.take_buffers()]
    assert [id(b) for b in plan.take_buffers()] == first  # nothing refers to them: reused
    sync = GradSync(plan, TwinComm(), mean=False)
    sync.put(1, np.ones(4, np.float32))
    sync.put(2, np.ones(3))
    kept = sync.finish()  # views of the buffers, alive below
    del sync
    fresh = GradSync(plan, TwinComm(), mean=False)
    assert [id(b) for b in fresh.buffers] != first
    fresh.put(1, np.full(4, 5.0, np.float32))
    fresh.put(2, np.full(3, 5.0))
    fresh.finish()
    np.testing.assert_array_equal(kept[1], np.full(4, 2.0))  # the kept gradients did not change
    np.testing.assert_array_equal(kept[2], np.full(3, 2.0))


# ---------------------------------------------------------------------- autodiff hook
def test_the_leaf_hook_fires_once_each_leaf_is_final():
    device = Device.flex().autodiff()
    a = Tensor.from_floats([1.0, 2.0], device=device).require_grad()
    b = Tensor.from_floats([3.0, 4.0], device=device).require_grad()
    c = Tensor.from_floats([5.0], device=device).require_grad()
    h = a * b
    loss = (h * a).sum() + (b * c).sum()  # a and b are used twice
    seen: list[tuple[int, np.ndarray]] = []
    with leaf_grad_hook(lambda node_id, grad: seen.append((node_id, np.array(grad)))):
        grads = loss.backward()
    ids = {a.primitive.node.id: "a", b.primitive.node.id: "b", c.primitive.node.id: "c"}
    assert sorted(ids[i] for i, _ in seen) == ["a", "b", "c"]
    for node_id, value in seen:  # what the hook saw is the final gradient
        np.testing.assert_array_equal(value, grads.get(node_id))
    np.testing.assert_allclose(a.grad(grads).to_numpy(), 2 * np.array([1.0, 2.0]) * np.array([3.0, 4.0]))
    # Outside the block backward runs without the hook.
    x = Tensor.from_floats([1.0], device=device).require_grad()
    (x * 2).sum().backward()
    assert len(seen) == 3


# ---------------------------------------------------------------------- data parallel in one process
def test_data_parallel_in_a_one_rank_world_changes_nothing():
    device = Device.flex().autodiff()
    device.seed(3)
    model = Classifier.new(device)
    dp = dist.DataParallel(model, bucket_cap_mb=1)
    assert dp.model is model and dp.world_size == 1 and dp.is_main()
    x = Tensor.from_floats(np.ones((2, 4)), device=device)
    y = Tensor.from_ints([0, 1], device=device)
    grads = dp.backward(cross_entropy(model(x), y), model)
    assert isinstance(grads, GradientsParams) and len(grads) == 4
    assert dp.sync_grads(grads) is grads
    dp.assert_in_sync(model)
    with pytest.raises(ConfigError, match="bucket_cap_mb"):
        dist.DataParallel(bucket_cap_mb=0)
    with pytest.raises(ConfigError, match="reduce must be"):
        dist.DataParallel(reduce="max")


@pytest.mark.parametrize(
    ("comm", "shard"),
    [(None, False), (TwinComm(), False), (None, True)],
    ids=["one rank", "two identical ranks", "one rank, shard_optimizer (nothing to shard)"],
)
def test_the_compiled_step_matches_the_eager_step(comm, shard):
    """``DataParallel.compile`` (two graphs, the all-reduce between) leaves the model of
    the eager loop; with two ranks holding the same batch the mean changes nothing."""
    device = Device.flex().autodiff()
    device.seed(3)
    start = Classifier.new(device)
    rng = np.random.default_rng(0)
    batches = [
        (
            Tensor.from_data(rng.normal(size=(8, 4)).astype(np.float32), device=device),
            Tensor.from_data(rng.integers(0, 3, 8), device=device),
        )
        for _ in range(4)
    ]
    eager, optim = start, AdamConfig().init()
    for x, y in batches:
        eager = optim.step(0.05, eager, GradientsParams.from_grads(cross_entropy(eager(x), y).backward(), eager))
    dp = dist.DataParallel(start, communicator=comm)
    step = dp.compile(lambda model, x, y: cross_entropy(model(x), y), AdamConfig().init(), shard_optimizer=shard)
    model = dp.model
    step.timings = {}
    for x, y in batches:
        model, loss = step(model, 0.05, x, y)
        assert np.isfinite(loss.into_scalar())
    assert sorted(step.timings) == ["communication", "forward_backward", "update"]
    assert all(seconds >= 0 for seconds in step.timings.values()) and step.timings["forward_backward"] > 0
    assert step._grads.stats["replays"] >= 2 and step._update.stats["replays"] >= 2  # sharding: under mpiexec
    want = {path: p.val().to_numpy() for path, p in eager.named_params()}
    for path, p in model.named_params():
        np.testing.assert_allclose(p.val().to_numpy(), want[path], rtol=1e-5, atol=1e-6, err_msg=path)
    with pytest.raises(ConfigError, match="loss_fn must be callable"):
        dp.compile(None, AdamConfig().init())
    with pytest.raises(ConfigError, match="module optimizer"):
        dp.compile(lambda model, x, y: model(x), object())


def _fit(strategy, compile=False, learners=None):
    device = Device.flex().autodiff()
    device.seed(0)
    train, valid = loaders()
    training = (
        SupervisedTraining()
        .renderer("none")
        .metric_valid_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(2)
    )
    if strategy is not None:
        training.learning_strategy(strategy)
    learner = Learner(Classifier.new(device), AdamConfig().init(), 5e-2, compile=compile)
    if learners is not None:
        learners.append(learner)
    return training.launch(learner, train, valid)


def test_the_learner_strategy_in_one_process_matches_single_device():
    plain, parallel = _fit(None), _fit(dist.DataParallel())
    assert _fit(SingleDevice()).history.to_dict() == plain.history.to_dict()
    assert parallel.history.to_dict() == plain.history.to_dict()
    for (path, p), (_, q) in zip(plain.model.named_params(), parallel.model.named_params()):
        np.testing.assert_array_equal(p.val().to_numpy(), q.val().to_numpy(), err_msg=path)
    with pytest.raises(ConfigError, match="learning strategy must be"):
        SupervisedTraining().learning_strategy("ddp")


def test_the_compiled_learner_strategy_follows_the_eager_run():
    """``compile=True`` under ``DataParallel``: in a one-rank world the whole update is
    compiled as on a single device (bit-identical to that run), within float rounding
    of the eager run. (Over several ranks the gradients compile and the all-reduce and
    the update run eagerly between: ``train`` in the stats.)"""
    learners: list[Learner] = []
    eager, single = _fit(None), _fit(None, compile=True)
    parallel = _fit(dist.DataParallel(), compile=True, learners=learners)
    stats = learners[0].compiled.stats()
    assert stats["update"]["replays"] > 0 and stats["update"]["eager"] == 0
    assert parallel.history.to_dict() == single.history.to_dict()
    for (path, p), (_, q), (_, r) in zip(
        eager.model.named_params(), single.model.named_params(), parallel.model.named_params()
    ):
        np.testing.assert_allclose(q.val().to_numpy(), p.val().to_numpy(), rtol=1e-5, atol=1e-6, err_msg=path)
        np.testing.assert_array_equal(r.val().to_numpy(), q.val().to_numpy(), err_msg=path)
    got, want = single.history.to_dict()["valid"]["Loss"], eager.history.to_dict()["valid"]["Loss"]
    np.testing.assert_allclose([got[e] for e in sorted(got)], [want[e] for e in sorted(want)], rtol=1e-5)


# ---------------------------------------------------------------------- metrics over ranks
def _update(metric, outputs, targets, loss=0.5):
    item = {"output": outputs, "targets": targets, "loss": np.array([loss])}
    metric.update(ItemView(item), MetricMetadata(Split.VALID, 1, 1, 1, 1, len(targets), len(targets), len(targets)))


@pytest.mark.parametrize("make", [LossMetric, AccuracyMetric, lambda: AurocMetric(multiclass=True), PrecisionMetric])
def test_merged_states_give_the_value_of_all_items(make, rng):
    outputs = rng.normal(size=(30, 3))
    targets = rng.integers(0, 3, 30)
    whole = make()
    _update(whole, outputs, targets, loss=0.7)
    parts = []
    for lo, hi, loss in ((0, 12, 0.7), (12, 30, 0.7)):
        part = make()
        _update(part, outputs[lo:hi], targets[lo:hi], loss)
        parts.append(part.state_dict())
    merged = copy.deepcopy(make())
    merged.load_state_dict(whole.merge_states(parts))
    assert merged.value() == pytest.approx(whole.value())


def test_ring_chunks_cover_the_buffer_in_order():
    from ember.distributed.ring import chunk_bounds

    assert chunk_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert chunk_bounds(2, 3) == [(0, 1), (1, 2), (2, 2)]
    for n, size in ((0, 2), (1, 1), (1031, 4), (70_001, 3)):
        bounds = chunk_bounds(n, size)
        assert bounds[0][0] == 0 and bounds[-1][1] == n and len(bounds) == size
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
        assert max(b - a for a, b in bounds) - min(b - a for a, b in bounds) <= 1


@pytest.mark.parametrize(
    ("text", "want"), [(None, 128 << 10), ("auto", 128 << 10), ("off", None), ("mpi", None), ("4096", 4096)]
)
def test_ring_threshold_from_the_environment(monkeypatch, text, want):
    from ember.distributed.ring import ring_min_chunk

    if text is None:
        monkeypatch.delenv("EMBER_DIST_RING", raising=False)
    else:
        monkeypatch.setenv("EMBER_DIST_RING", text)
    assert ring_min_chunk() == want


@pytest.mark.parametrize("text", ["fast", "-5"])
def test_a_bad_ring_threshold_is_refused(monkeypatch, text):
    from ember.distributed.ring import ring_min_chunk

    monkeypatch.setenv("EMBER_DIST_RING", text)
    with pytest.raises(ConfigError, match="EMBER_DIST_RING"):
        ring_min_chunk()


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_the_mean_divides_to_the_bit(n, rng):
    from ember.distributed.staging import divide_in_place

    for dtype in (np.float32, np.float64, np.float16):
        values = (rng.standard_normal(1000) * 1e3).astype(dtype)
        got = values.copy()
        divide_in_place(got, n)
        assert got.tobytes() == (values / dtype(n)).astype(dtype).tobytes(), (n, dtype)


def test_the_sharded_step_refuses_mixed_dtypes_and_non_modules():
    device = Device.flex().autodiff()
    device.seed(4)
    model = Classifier.new(device)
    mixed = model.map_params(lambda p, path: p.map(lambda t: t.cast("float64")) if path.endswith("bias") else p)
    dp = dist.DataParallel(mixed, communicator=TwinComm())
    step = dp.compile(lambda m, x, y: cross_entropy(m(x), y), AdamConfig().init(), shard_optimizer=True)
    x = Tensor.from_data(np.ones((2, 4), np.float32), device=device)
    y = Tensor.from_data(np.array([0, 1]), device=device)
    with pytest.raises(ConfigError, match="share one float dtype"):
        step(dp.model, 0.1, x, y)
    with pytest.raises(ConfigError, match="expected a Module"):
        step("model", 0.1, x, y)
