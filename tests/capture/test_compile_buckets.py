"""``ember.compile(fn, buckets=...)``: rows padded to buckets, results sliced back.

Oracles: the same function compiled without buckets (bit-identical where the kernels
compute a row alike at any row count: elementwise and per-row ops), float64 numpy for a
linear layer, and the counts of traces per bucket. Refusals: each op that would mix
padded rows into real ones is named."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import Device, Distribution, Tensor
from ember.capture import BucketError, RecompileWarning
from ember.errors import ConfigError
from ember.nn import LinearConfig, LstmConfig
from ember.optim import GradientsParams, SgdConfig
from ember.tensor.norm import layer_norm


def _floats(rng, *shape):
    return Tensor.from_data(rng.standard_normal(shape).astype(np.float32), device=Device.flex())


def rowwise(x, gamma):
    """Per-row ops only: layer norm, GELU, softmax along the features."""
    y = layer_norm(x, gamma, None, 1e-5)
    return F.softmax(F.gelu(y) * gamma, -1), y.sum_dim(-1)


def test_rowwise_results_are_bit_identical_to_unbucketed(rng):
    gamma = _floats(rng, 24)
    bucketed = ember.compile(rowwise, buckets={"x": 0})
    for rows in (3, 5, 6, 11, 16, 1):
        x = _floats(rng, rows, 24)
        plain = ember.compile(rowwise)
        for _ in range(2):  # the first run of a trace replays it, the second runs compiled code
            want = [t.to_numpy() for t in plain(x, gamma)]
            got = [t.to_numpy() for t in bucketed(x, gamma)]
        for g, w in zip(got, want):
            assert g.shape == w.shape and np.array_equal(g, w)
    info = bucketed.cache_info()
    assert info["buckets"] == [2, 4, 8, 16] and info["traces"] == 4 and info["entries"] == 4


@pytest.mark.parametrize("device", ["flex", "fusion", "autodiff"])
def test_linear_rows_match_float64_numpy(rng, device):
    dev = {"flex": Device.flex(), "fusion": Device.flex().fusion(), "autodiff": Device.flex().autodiff()}[device]
    layer = LinearConfig(16, 8).init(dev)
    forward = ember.compile(lambda model, x: model(x), buckets={1: 0})
    w = layer.weight.val().to_numpy().astype(np.float64)
    b = layer.bias.val().to_numpy().astype(np.float64)
    for rows in (5, 7, 3, 8, 6):
        x = Tensor.from_data(rng.standard_normal((rows, 16)).astype(np.float32), device=dev)
        got = forward(layer, x).to_numpy()
        assert got.shape == (rows, 8)
        np.testing.assert_allclose(got, x.to_numpy().astype(np.float64) @ w + b, rtol=1e-5, atol=1e-6)
    assert forward.stats["traces"] == 2  # buckets 4 and 8 (8 exact: nothing padded)
    assert forward.stats["padded"] == 4


def test_a_growing_batch_traces_once_per_bucket(rng):
    layer = LinearConfig(6, 4).init(Device.flex())

    def forward(model, x):
        return F.relu(model(x))

    pow2 = ember.compile(forward, buckets={"x": 0})
    listed = ember.compile(forward, buckets={"x": 0}, bucket_sizes=[8, 16])
    plain = ember.compile(forward, max_traces=32)
    for rows in range(1, 21):
        x = _floats(rng, rows, 6)
        want = plain(layer, x).to_numpy()
        for fn in (pow2, listed):
            np.testing.assert_allclose(fn(layer, x).to_numpy(), want, rtol=1e-6, atol=1e-7)
    assert pow2.stats["traces"] == 5 and pow2.cache_info()["buckets"] == [2, 4, 8, 16, 32]
    # 1-8 in 8, 9-16 in 16, past the largest size each count at its own size
    assert listed.stats["traces"] == 2 + 4 and listed.cache_info()["buckets"][:2] == [8, 16]
    assert plain.stats["traces"] == 20
    assert pow2.cache_info()["hits"] == 20 - 5


def test_a_structure_argument_pads_every_tensor_and_outputs_are_cut(rng):
    def pair(batch):
        x, y = batch
        return {"sum": x + y, "scaled": x.mul_scalar(2.0)}, x.dims()[1]

    fn = ember.compile(pair, buckets={"batch": 0})
    x, y = _floats(rng, 5, 3), _floats(rng, 5, 3)
    out, width = fn((x, y))
    assert width == 3 and out["sum"].dims() == [5, 3]
    np.testing.assert_array_equal(out["sum"].to_numpy(), x.to_numpy() + y.to_numpy())
    np.testing.assert_array_equal(out["scaled"].to_numpy(), x.to_numpy() * 2)


def test_rows_along_another_dim_and_merged_by_a_reshape(rng):
    def fn(x):  # rows in dim 1; a reshape merges them with dim 0 and splits them back
        flat = x.reshape([-1, 4]).exp()
        return flat.reshape([2, -1, 4]).sum_dim(2)

    bucketed = ember.compile(fn, buckets={"x": 1})
    for rows in (3, 5):
        x = _floats(rng, 2, rows, 4)
        got = bucketed(x).to_numpy()
        np.testing.assert_allclose(got, np.exp(x.to_numpy().astype(np.float64)).sum(2, keepdims=True), rtol=1e-5)
    assert bucketed.stats["traces"] == 2


@pytest.mark.parametrize(
    ("fn", "op"),
    [
        (lambda x: x.mean_dim(0), "reduce"),
        (lambda x: x.swap_dims(0, 1).matmul(x), "contracts the rows"),
        (lambda x: F.softmax(x, 0), "softmax"),
        (lambda x: x.narrow(0, 0, 1), "slice"),
        (lambda x: x.flip([0]), "flip"),
    ],
)
def test_an_op_that_mixes_rows_is_refused_by_name(rng, fn, op):
    bucketed = ember.compile(fn, buckets={0: 0})
    with pytest.raises(BucketError, match=op):
        bucketed(_floats(rng, 3, 4))


def test_attention_over_a_bucketed_sequence_is_refused(rng):
    def attend(q):
        return F.scaled_dot_product_attention(q, q, q)

    with pytest.raises(BucketError, match="attends across the rows"):
        ember.compile(attend, buckets={"q": 2})(_floats(rng, 1, 2, 5, 8))
    batch = ember.compile(attend, buckets={"q": 0})  # over the batch it is exact
    q = _floats(rng, 3, 2, 5, 8)
    want = ember.compile(attend)(q).to_numpy()
    np.testing.assert_allclose(batch(q).to_numpy(), want, rtol=1e-6, atol=1e-7)


def test_random_draws_and_state_updates_are_refused(rng):
    def noisy(x):
        return x + Tensor.random(x.dims(), Distribution.uniform(0.0, 1.0), device=x.device)

    with pytest.raises(BucketError, match="random"):
        ember.compile(noisy, buckets={0: 0})(_floats(rng, 3, 4))
    device = Device.flex().autodiff()
    layer = LinearConfig(4, 1).init(device)
    optim = SgdConfig().init()

    def step(model, x):  # a training step: its loss averages the rows
        loss = model(x).sum()
        return optim.step(0.1, model, GradientsParams.from_grads(loss.backward(), model)), loss

    x = Tensor.from_data(rng.standard_normal((3, 4)).astype(np.float32), device=device)
    with pytest.raises(BucketError, match="reduce|contracts"):
        ember.compile(step, buckets={"x": 0})(layer, x)


def test_created_sizes_and_disagreeing_rows_are_refused(rng):
    with pytest.raises(BucketError, match="padded size"):
        ember.compile(lambda x: Tensor.ones([x.dims()[0], 2], device=x.device), buckets={0: 0})(_floats(rng, 3, 4))
    with pytest.raises(BucketError, match="sums over a tensor created with the padded size"):
        count = ember.compile(lambda x: x * Tensor.ones([x.dims()[0]], device=x.device).sum(), buckets={0: 0})
        count(_floats(rng, 3, 4))
    fn = ember.compile(lambda x, y: x + y, buckets={"x": 0, "y": 0})
    with pytest.raises(BucketError, match="disagree"):
        fn(_floats(rng, 3, 4), _floats(rng, 5, 4))
    with pytest.raises(ConfigError, match="not an argument"):
        ember.compile(lambda x: x, buckets={"z": 0})
    with pytest.raises(ConfigError, match="bucket_sizes"):
        ember.compile(lambda x: x, buckets={"x": 0}, bucket_sizes=[1, 8])


def test_least_recently_used_trace_is_dropped_with_one_warning(rng):
    fn = ember.compile(lambda x: x.exp(), max_traces=2)
    a, b, c, d = (_floats(rng, n, 2) for n in (1, 2, 3, 4))
    fn(a)
    fn(b)
    fn(a)  # a is now the most recently used
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(c)  # drops b, not a
        fn(d)  # drops a
    assert [w.category for w in caught] == [RecompileWarning]
    assert "buckets" in str(caught[0].message) and "max_traces" in str(caught[0].message)
    fn(c)
    info = fn.cache_info()
    assert info == {**info, "entries": 2, "max_entries": 2, "traces": 4, "evictions": 2, "hits": 2}


def test_an_lstm_classifier_over_a_bucketed_batch(rng):
    """The recurrence runs along the sequence, the rows are the batch: exact; bucketing
    the sequence instead is refused."""
    lstm = LstmConfig(4, 8, num_layers=2).init(Device.flex())

    def classify(model, x):
        out, _ = model(x)
        return F.log_softmax(out, -1)

    bucketed = ember.compile(classify, buckets={"x": 0})
    plain = ember.compile(classify)
    for rows in (3, 5):
        x = _floats(rng, rows, 6, 4)
        np.testing.assert_allclose(bucketed(lstm, x).to_numpy(), plain(lstm, x).to_numpy(), rtol=1e-5, atol=1e-6)
    assert bucketed.cache_info()["buckets"] == [4, 8]
    with pytest.raises(BucketError, match="lstm_sequence"):
        ember.compile(classify, buckets={"x": 1})(lstm, _floats(rng, 2, 5, 4))


def test_keyword_arguments_and_a_graph_break_run_on_the_real_rows(rng):
    fn = ember.compile(lambda scale, x: x.mul_scalar(scale), buckets={1: 0})
    x = _floats(rng, 3, 2)
    np.testing.assert_array_equal(fn(2.0, x=x).to_numpy(), x.to_numpy() * 2)  # position 1 is x
    assert fn.cache_info()["buckets"] == [4]

    broken = ember.compile(lambda x: x.argwhere(), buckets={"x": 0})
    mask = Tensor.from_data(np.array([[1, 0], [0, 1], [1, 1]], np.int64), device=Device.flex())
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = broken(mask).to_numpy()  # eagerly, on the 3 real rows: no padded row's indices
    np.testing.assert_array_equal(got, np.argwhere(mask.to_numpy()))


def test_an_op_that_changes_the_number_of_rows_is_refused(rng):
    def first_column_of_first_row(x):
        index = Tensor.from_data(np.zeros((1, 1), np.int64), device=x.device)
        return x.gather(1, index)

    with pytest.raises(BucketError, match="changes the number of rows"):
        ember.compile(first_column_of_first_row, buckets={"x": 0})(_floats(rng, 3, 4))
