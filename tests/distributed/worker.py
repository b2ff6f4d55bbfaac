"""What each rank runs in the MPI tests (``mpiexec -n N python worker.py CHECK ...``).

Every check asserts on its own rank and prints ``ok CHECK rank R``; a failed
assertion ends the run through ember's excepthook (non-zero exit), which the
pytest side sees. ``python worker.py learner ...`` without mpiexec is the
single-process reference.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember.distributed as dist
from ember import Device, Module, Tensor
from ember.data import ArrayDataset, DataLoaderBuilder, DefaultBatcher
from ember.data.dataset.shuffled import permutation
from ember.errors import ConfigError, DistributedError
from ember.nn import Linear, LinearConfig, Relu
from ember.optim import AdamConfig, GradientsParams, SgdConfig
from ember.train import AccuracyMetric, Learner, LossMetric, SupervisedTraining
from tests.train.models import Classifier, blobs, cross_entropy


def rank_data(r: int, shape, dtype) -> np.ndarray:
    """The array rank ``r`` contributes (every rank can compute every rank's)."""
    rng = np.random.default_rng(100 + r)
    if np.dtype(dtype).kind == "f" or str(dtype) == "bfloat16":
        return rng.normal(size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(-50, 50, size=shape).astype(dtype)


def devices() -> list[Device]:
    out = [Device.flex(), Device.flex().autodiff()]
    if os.environ.get("EMBER_TEST_CUBE") == "1":
        out.append(Device.wgpu())
    return out


def check_collectives() -> None:
    import ml_dtypes

    r, n = dist.rank(), dist.world_size()
    for device in devices():
        cube = device.backend_name == "cube"
        dtypes = [np.float32, np.int32] if cube else [np.float32, np.float64, np.int64, np.float16, ml_dtypes.bfloat16]
        for dtype in dtypes:
            shape = (3, 2 * n)
            everyone = [rank_data(q, shape, dtype) for q in range(n)]
            mine = Tensor.from_data(everyone[r], device=device)
            wide = np.stack(everyone).astype(np.float64)
            exact = np.dtype(dtype) in (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.int32))
            tol = 0 if exact else (1e-2 if np.dtype(dtype).itemsize == 2 else 1e-6)
            expected = {"sum": wide.sum(0), "max": wide.max(0), "min": wide.min(0)}
            if np.dtype(dtype).kind == "f" or np.dtype(dtype).name == "bfloat16":
                expected["mean"] = wide.mean(0)
            for op, want in expected.items():
                got = dist.all_reduce(mine, op)
                assert got.device is device and got.dtype == mine.dtype, (op, got.device, got.dtype)
                np.testing.assert_allclose(
                    got.to_numpy().astype(np.float64),
                    want,
                    rtol=tol,
                    atol=tol,
                    err_msg=f"all_reduce {op} {dtype} on {device!r}",
                )
            unchecked = dist.all_reduce(mine, "max", check=False).to_numpy().astype(np.float64)
            np.testing.assert_allclose(unchecked, expected["max"], rtol=tol, atol=tol)
            got = dist.broadcast(mine, root=n - 1).to_numpy()
            np.testing.assert_array_equal(got, everyone[n - 1])
            np.testing.assert_array_equal(dist.all_gather(mine).to_numpy(), np.concatenate(everyone, 0))
            np.testing.assert_array_equal(dist.all_gather(mine, dim=1).to_numpy(), np.concatenate(everyone, 1))
            got = dist.reduce_scatter(mine, "sum", dim=1).to_numpy().astype(np.float64)
            block = 2
            np.testing.assert_allclose(got, wide.sum(0)[:, r * block : (r + 1) * block], rtol=tol, atol=tol)
    # Large results reuse buffers only once nothing refers to them.
    big = [dist.all_reduce(Tensor.full([64, 1024], float(k))) for k in range(6)]
    assert [float(t.to_numpy()[0, 0]) for t in big] == [float(k * n) for k in range(6)]
    # Objects, barrier, and a mismatch that every rank reports.
    assert dist.all_gather_object({"rank": r}) == [{"rank": q} for q in range(n)]
    assert dist.broadcast_object(f"from {r}", root=1) == "from 1"
    dist.barrier()
    try:
        dist.all_reduce(Tensor.zeros([r + 1]))
    except DistributedError as error:
        assert "rank 1: float32 [2]" in str(error), error
    else:
        raise AssertionError("a shape mismatch between ranks was not detected")
    print(f"ok collectives rank {r}", flush=True)


def check_ring() -> None:
    """All-reduces large enough for the ring (``EMBER_DIST_RING`` sets the threshold):
    every op and dtype against numpy, chunks of unequal length, in place and not,
    several in flight at once, results bit-identical on every rank."""
    from ember.distributed import ReduceOp

    comm = dist.communicator()
    r, n = comm.rank, comm.size
    assert comm._ring is not None, "the ring is off"
    numpy_ops = {ReduceOp.SUM: np.add.reduce, ReduceOp.MAX: np.maximum.reduce, ReduceOp.MIN: np.minimum.reduce}
    for size in (1, n - 1, 1031, 70_001):
        for dtype in (np.float32, np.float64, np.int64, np.uint8):
            everyone = [rank_data(q, (size,), dtype).astype(dtype) for q in range(n)]
            for op, reduce in numpy_ops.items():
                want = reduce(np.stack(everyone), axis=0, dtype=dtype)
                # A float sum's order of additions depends on the chunk: rounding only.
                tol = 1e-6 if op is ReduceOp.SUM and np.dtype(dtype).kind == "f" else 0
                got = comm.all_reduce(everyone[r], op)
                np.testing.assert_allclose(got, want, tol, tol, err_msg=f"ring {op} {dtype} {size}")
                buffer = everyone[r].copy()
                request = comm.all_reduce_start(buffer, op, "test")
                request.test()
                request.wait()
                np.testing.assert_allclose(buffer, want, tol, tol, err_msg=f"ring in place {op} {dtype} {size}")
                assert got.tobytes() == buffer.tobytes(), "in place and not differ"
    for rows in (n, 7 * n, 3001 * n):  # reduce-scatter and all-gather take the ring too
        everyone = [rank_data(q, (rows, 3), np.float64) for q in range(n)]
        block = rows // n
        got = comm.reduce_scatter(everyone[r], ReduceOp.SUM)
        np.testing.assert_allclose(got, sum(everyone)[r * block : (r + 1) * block], 1e-12, 1e-12)
        np.testing.assert_array_equal(comm.all_gather(everyone[r]), np.stack(everyone))
        flat = everyone[r].reshape(-1).copy()  # in place, on flat buffers
        comm.reduce_scatter_in_place(flat, ReduceOp.SUM)
        span = slice(r * block * 3, (r + 1) * block * 3)
        np.testing.assert_allclose(flat[span], sum(everyone).reshape(-1)[span], 1e-12, 1e-12)
        comm.all_gather_in_place(flat)
        assert len({digest.tobytes() for digest in dist.all_gather_object(flat)}) == 1
        np.testing.assert_allclose(flat, sum(everyone).reshape(-1), 1e-12, 1e-12)
    buffers = [np.full(5000 + k, float(r + k), np.float32) for k in range(4)]
    requests = [comm.all_reduce_start(b, ReduceOp.SUM) for b in buffers]
    for request in reversed(requests):  # finishing out of order is fine
        request.wait()
    for k, b in enumerate(buffers):
        assert np.all(b == sum(q + k for q in range(n))), k
    x = np.random.default_rng(r).standard_normal(100_003).astype(np.float32)
    got = dist.all_reduce(Tensor.from_data(x)).to_numpy()
    np.testing.assert_allclose(
        got, sum(np.random.default_rng(q).standard_normal(100_003) for q in range(n)), 1e-5, 1e-5
    )
    assert len({digest.tobytes() for digest in dist.all_gather_object(got)}) == 1, "ranks' sums differ"
    print(f"ok ring rank {r}", flush=True)


def check_sampler() -> None:
    from ember.distributed import DistributedSampler

    r, n = dist.rank(), dist.world_size()
    items = 23
    for drop_last in (False, True):
        sampler = DistributedSampler(shuffle=True, seed=5, drop_last=drop_last)
        for epoch in (0, 1):
            orders = dist.all_gather_object(sampler.order(items, epoch).tolist())
            assert len({len(o) for o in orders}) == 1
            perm = permutation(items, 5, epoch)
            dealt = [x for k in range(len(orders[0])) for x in (o[k] for o in orders)]
            if drop_last:
                assert dealt == perm[: items - items % n].tolist()
            else:
                total = -(-items // n) * n
                assert dealt == np.resize(perm, total).tolist()
        # The loader reads this rank's shard.
        loader = (
            DataLoaderBuilder(DefaultBatcher())
            .batch_size(4)
            .sampler(sampler)
            .set_device(Device.flex())
            .build(ArrayDataset(np.arange(items, dtype=np.float32)[:, None], np.arange(items)))
        )
        seen = [int(v) for _, y in loader.iter(1) for v in y.to_numpy()]
        assert seen == sampler.order(items, 1).tolist()
    print(f"ok sampler rank {r}", flush=True)


class MlpWithExtra(Module):
    l1: Linear
    act: Relu
    l2: Linear
    extra: Linear  # used only on some ranks in the unused-parameter check

    @classmethod
    def new(cls, device: Device, hidden: int = 16) -> MlpWithExtra:
        return cls(
            LinearConfig(6, hidden).init(device),
            Relu(),
            LinearConfig(hidden, 3).init(device),
            LinearConfig(6, 3).init(device),
        )

    def forward(self, x: Tensor, use_extra: bool = False) -> Tensor:
        out = self.l2(self.act(self.l1(x)))
        return out + self.extra(x) if use_extra else out


def _params(model: Module) -> dict[str, np.ndarray]:
    return {path: p.val().to_numpy() for path, p in model.named_params()}


def _train(model, optim, x, y, batches, dp=None, mode="backward", use_extra=lambda step: False):
    """A hand loop: ``batches`` is a list of index arrays (this rank's part of each step)."""
    device = model.devices()[0]
    for step, idx in enumerate(batches):
        xb = Tensor.from_data(x[idx], device=device)
        yb = Tensor.from_data(y[idx], device=device)
        loss = cross_entropy(model(xb, use_extra(step)), yb)
        if dp is None:
            grads = GradientsParams.from_grads(loss.backward(), model)
        elif mode == "backward":
            grads = dp.backward(loss, model)
        else:
            grads = dp.sync_grads(GradientsParams.from_grads(loss.backward(), model), model)
        model = optim.step(0.05, model, grads)
    return model


def check_ddp() -> None:
    r, n = dist.rank(), dist.world_size()
    device = Device.flex().autodiff()
    device.seed(1000 + r)  # ranks start from different values: DataParallel copies rank 0's
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 6)).astype(np.float32)
    y = rng.integers(0, 3, 48)
    global_batch = 12
    steps = [permutation(48, 3, e)[k * global_batch : (k + 1) * global_batch] for e in range(2) for k in range(4)]
    mine = [s[r::n] for s in steps]  # what a DistributedSampler deals this rank
    for make_optim, tol in ((SgdConfig().init, 2e-6), (AdamConfig().init, 5e-5)):
        dp = dist.DataParallel(MlpWithExtra.new(device), bucket_cap_mb=0.0004)  # several buckets
        start = dp.model
        assert len(dp._plan) > 1, dp._plan
        ref = _train(start, make_optim(), x, y, steps)  # one process, the whole batch
        runs = {mode: _train(start, make_optim(), x, y, mine, dp, mode) for mode in ("backward", "sync")}
        again = _train(start, make_optim(), x, y, mine, dp, "backward")
        for mode, model in runs.items():
            dp.assert_in_sync(model)
            for path, value in _params(model).items():
                np.testing.assert_allclose(
                    value, _params(ref)[path], rtol=tol, atol=tol, err_msg=f"{mode} {path} (world size {n})"
                )
        a, b, c = _params(runs["backward"]), _params(runs["sync"]), _params(again)
        for path in a:
            assert a[path].tobytes() == c[path].tobytes(), f"not bit-identical run to run: {path}"
            assert a[path].tobytes() == b[path].tobytes(), f"overlapped and plain sync differ: {path}"
        everyone = dist.all_gather_object({k: v.tobytes() for k, v in a.items()})
        assert all(e == everyone[0] for e in everyone), "ranks' parameters differ"
    # A parameter used only on rank 0 still gets the same gradient everywhere.
    dp = dist.DataParallel(MlpWithExtra.new(device))
    model = _train(dp.model, SgdConfig().init(), x, y, mine[:2], dp, use_extra=lambda step: r == 0)
    dp.assert_in_sync(model)
    # Models that differ between ranks are refused at the start, on every rank.
    for bad in (
        lambda: MlpWithExtra.new(device, hidden=16 + r),
        lambda: MlpWithExtra.new(device).map_params(
            lambda p, path: p if r == 0 or path != "l2.bias" else p.map(lambda t: t.cast("float64"))
        ),
    ):
        try:
            dist.DataParallel(bad())
        except DistributedError as error:
            assert "rank 1" in str(error) and "differ" in str(error), error
        else:
            raise AssertionError("a model mismatch between ranks was not detected")
    print(f"ok ddp rank {r}", flush=True)


def check_compiled() -> None:
    """``DataParallel.compile``: N ranks on their shards give one process's parameters on
    the whole batch (within rounding), bit-identical on every rank and run to run."""
    r, n = dist.rank(), dist.world_size()
    device = Device.flex().autodiff()
    device.seed(1000 + r)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 6)).astype(np.float32)
    y = rng.integers(0, 3, 48)
    steps = [permutation(48, 3, e)[k * 12 : (k + 1) * 12] for e in range(2) for k in range(4)]
    mine = [s[r::n] for s in steps]

    def loss_fn(model, xb, yb):
        return cross_entropy(model(xb), yb)

    def run(dp, batches, shard=False):
        step = dp.compile(loss_fn, AdamConfig().init(), shard_optimizer=shard)
        model = dp.model
        for idx in batches:
            xb, yb = Tensor.from_data(x[idx], device=device), Tensor.from_data(y[idx], device=device)
            model, loss = step(model, 0.05, xb, yb)
            assert np.isfinite(loss.into_scalar())
        update = step._update_shard if shard else step._update
        assert step._grads.stats["replays"] > 0 and update.stats["replays"] > 0, "not compiled"
        return model

    dp = dist.DataParallel(MlpWithExtra.new(device), bucket_cap_mb=0.0004)  # several buckets
    start = dp.model
    ref = _train(start, AdamConfig().init(), x, y, steps)  # one process, eager, the whole batch
    try:  # sharding needs a gradient for every trainable parameter; "extra" gets none
        run(dp, mine[:1], shard=True)
    except ConfigError as error:
        assert "no gradient for a trainable parameter of shape [6, 3]" in str(error), error
    else:
        raise AssertionError("a parameter without a gradient was not refused")
    frozen = start.map_params(lambda p, path: p.set_require_grad(not path.startswith("extra")))
    dp = dist.DataParallel(frozen, bucket_cap_mb=0.0004)
    for shard in (False, True):  # the update on every rank, or sharded (ZeRO stage 1)
        first, second = run(dp, mine, shard), run(dp, mine, shard)
        dp.assert_in_sync(first)
        for path, value in _params(first).items():
            np.testing.assert_allclose(
                value, _params(ref)[path], rtol=5e-5, atol=5e-5, err_msg=f"{path} (world size {n}, shard {shard})"
            )
            assert value.tobytes() == _params(second)[path].tobytes(), f"not bit-identical run to run: {path}"
    print(f"ok compiled rank {r}", flush=True)


def check_learner(artifact_dir: str, epochs: int, global_batch: int, out: str | None) -> None:
    """The Learner, data parallel: per-rank batch ``global_batch / world size``."""
    r, n = dist.rank(), dist.world_size()
    device = Device.flex().autodiff()
    device.seed(7)
    x, y = blobs(96, seed=0)
    flex = Device.flex()
    train = (
        DataLoaderBuilder(DefaultBatcher())
        .batch_size(global_batch // n)
        .shuffle(11)
        .set_device(flex)
        .build(ArrayDataset(x[:72], y[:72]))
    )
    valid = DataLoaderBuilder(DefaultBatcher()).batch_size(5).set_device(flex).build(ArrayDataset(x[72:], y[72:]))
    training = (
        SupervisedTraining(artifact_dir)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(epochs)
        .renderer("plain")
        .plots(False)
    )
    learner = Learner(
        Classifier.new(device),
        AdamConfig().init(),
        2e-2,
        strategy=dist.DataParallel() if dist.launched_by_mpi() else None,
    )
    result = training.launch(learner, train, valid)
    params = {k: v.tolist() for k, v in _params(result.model).items()}
    everyone = dist.all_gather_object(params)
    assert all(e == everyone[0] for e in everyone), "ranks' parameters differ after fit"
    if r == 0 and out:
        Path(out).write_text(
            json.dumps({"params": params, "history": result.history.to_dict(), "epochs": result.epochs})
        )
    print(f"ok learner rank {r}", flush=True)


def check_fault(mode: str) -> None:
    """A data-parallel loop in which rank 1 fails at step 3: it raises, is killed, or
    freezes (stopped: alive but silent, like a hung node)."""
    r = dist.rank()
    device = Device.flex().autodiff()
    dp = dist.DataParallel(MlpWithExtra.new(device))
    model, optim = dp.model, SgdConfig().init()
    x = Tensor.ones([4, 6], device=device)
    for step in range(10_000):
        if step == 3 and r == 1:
            if mode == "raise":
                raise ValueError("a deliberate failure on rank 1")
            os.kill(os.getpid(), signal.SIGSTOP if mode == "freeze" else signal.SIGKILL)
        loss = (model(x) ** 2).mean()
        model = optim.step(0.01, model, dp.backward(loss, model))
        time.sleep(0.01)
    raise AssertionError("the run went on after rank 1 failed")


def main() -> None:
    check = sys.argv[1]
    dist.init()
    if check == "basic":
        check_collectives()
        check_sampler()
        check_ddp()
        check_compiled()
    elif check == "ring":
        check_ring()
    elif check == "learner":
        check_learner(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else None)
    elif check in ("raise", "kill", "freeze"):
        check_fault(check)
    else:
        raise SystemExit(f"unknown check {check!r}")


if __name__ == "__main__":
    main()
