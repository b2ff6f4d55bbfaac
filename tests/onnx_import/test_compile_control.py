"""Control flow under ``ember.onnx.load(..., compile=True)``: a Loop with a constant trip
count unrolls into the trace, an If on a shape-derived condition traces the taken branch
per input shape, a Scan unrolls; a condition read from a tensor's values runs eagerly
with one CompileWarning naming the node. Every result against onnxruntime, on flex and
on a fusion device (whose plans must not bake a traced argument's value in)."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from ember.capture import CompileWarning
from tests.onnx_import.helpers import onnx_model, run_ort
from tests.onnx_import.test_trainable_subgraphs import subgraph_model, weights

F = 1
I64 = 7
BOOL = 9
DEVICES = {"flex": Device.flex, "fusion": lambda: Device.flex().fusion()}


@contextlib.contextmanager
def no_fallback():
    """A context in which a CompileWarning (an eager fallback) is an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        yield


def loop_model(onnx, trips: int) -> bytes:
    """h <- tanh(h @ w + i) for ``trips`` iterations (a constant trip count, the condition
    passed through), scanning each h."""
    helper = onnx.helper
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["h_in", "w"], ["hw"]),
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Add", ["hw", "i_f"], ["ha"]),
            helper.make_node("Tanh", ["ha"], ["h_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Identity", ["h_out"], ["scan"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c_in", BOOL, []),
            helper.make_tensor_value_info("h_in", F, ["n", 4]),
        ],
        [
            helper.make_tensor_value_info("c_out", BOOL, []),
            helper.make_tensor_value_info("h_out", F, ["n", 4]),
            helper.make_tensor_value_info("scan", F, ["n", 4]),
        ],
    )
    w = (np.random.default_rng(3).standard_normal((4, 4)) * 0.5).astype(np.float32)
    inits = [
        onnx.numpy_helper.from_array(w, "w"),
        onnx.numpy_helper.from_array(np.array(trips, np.int64), "m"),
        onnx.numpy_helper.from_array(np.array(True), "c0"),
    ]
    loop = helper.make_node("Loop", ["m", "c0", "x"], ["h", "hs"], name="steps", body=body)
    return onnx_model(onnx, [loop], [("x", F, ["n", 4])], [("h", F, ["n", 4]), ("hs", F, None)], inits)


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_a_loop_with_a_constant_trip_count_unrolls(onnx, ort, rng, device):
    dev = DEVICES[device]()
    data = loop_model(onnx, 5)
    model = ember.onnx.load(data, dev, compile=True)
    with no_fallback():
        for n in (2, 2, 3):
            x = rng.standard_normal((n, 4)).astype(np.float32)
            got = model(Tensor.from_data(x, device=dev))
            for g, w in zip(got, run_ort(ort, data, x)):
                np.testing.assert_allclose(g.to_numpy(), w, rtol=1e-5, atol=1e-6)
    assert model.stats["traces"] == 2 and model.stats["replays"] == 1 and model.stats["eager"] == 0


def shape_if_model(onnx) -> bytes:
    """y = If(rows > 3) then x @ w else -x: the condition from a dynamic dim."""
    helper = onnx.helper
    then = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, None)]
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, None)]
    )
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
        helper.make_node("Greater", ["s", "three"], ["big"]),
        helper.make_node("Squeeze", ["big"], ["c"]),
        helper.make_node("If", ["c"], ["y"], name="by_rows", then_branch=then, else_branch=other),
    ]
    w = np.random.default_rng(4).standard_normal((2, 2)).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(np.array([3], np.int64), "three"), onnx.numpy_helper.from_array(w, "w")]
    return onnx_model(onnx, nodes, [("x", F, ["n", 2])], [("y", F, ["n", 2])], inits)


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_an_if_on_a_shape_traces_the_taken_branch_per_shape(onnx, ort, rng, device):
    dev = DEVICES[device]()
    data = shape_if_model(onnx)
    model = ember.onnx.load(data, dev, compile=True)
    with no_fallback():
        for n in (2, 5, 2, 5):
            x = rng.standard_normal((n, 2)).astype(np.float32)
            got = model(Tensor.from_data(x, device=dev)).to_numpy()
            np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)
    assert model.stats["traces"] == 2 and model.stats["replays"] == 2 and model.stats["eager"] == 0


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_a_tensor_condition_runs_eagerly_with_one_warning(onnx, ort, rng, device):
    """The If reads its condition from an input tensor: one CompileWarning naming the
    node, then eager calls that take the branch each condition selects (a fusion plan
    traced with the first condition would replay it for the second)."""
    dev = DEVICES[device]()
    data = subgraph_model(onnx, weights(5))
    model = ember.onnx.load(data, dev, compile=True)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    for i, flag in enumerate((True, False, True, False)):
        args = Tensor.from_data(x, device=dev), Tensor.from_data(np.array(flag), device=dev)
        if i == 0:
            with pytest.warns(CompileWarning, match="If node .*condition is a tensor's value"):
                y, s = model(*args)
        else:
            with no_fallback():
                y, s = model(*args)
        want = run_ort(ort, data, x, np.array(flag))
        np.testing.assert_allclose(y.to_numpy(), want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s.to_numpy(), want[1], rtol=1e-5, atol=1e-6)
    assert model.stats["eager"] == 4 and model.stats["traces"] == 0


def test_a_loop_condition_computed_from_data_runs_eagerly(onnx, ort, rng):
    """x <- x * 1.5 + i while sum(x) < 40: the body's condition is a tensor's value."""
    helper = onnx.helper
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["x_in", "w"], ["xw"]),
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Add", ["xw", "i_f"], ["x_out"]),
            helper.make_node("ReduceSum", ["x_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["go"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", BOOL, []),
            helper.make_tensor_value_info("x_in", F, [3]),
        ],
        [helper.make_tensor_value_info("go", BOOL, []), helper.make_tensor_value_info("x_out", F, [3])],
    )
    inits = [
        onnx.numpy_helper.from_array(np.array(1.5, np.float32), "w"),
        onnx.numpy_helper.from_array(np.array(40.0, np.float32), "limit"),
        onnx.numpy_helper.from_array(np.array(10, np.int64), "m"),
    ]
    loop = helper.make_node("Loop", ["m", "", "x"], ["x_final"], name="until", body=body)
    data = onnx_model(onnx, [loop], [("x", F, [3])], [("x_final", F, [3])], inits)
    model = ember.onnx.load(data, Device.flex(), compile=True)
    for i in range(2):
        x = rng.uniform(0.5, 2.0, 3).astype(np.float32)
        if i == 0:
            with pytest.warns(CompileWarning, match="Loop node 'until''s body condition"):
                got = model(Tensor.from_data(x)).to_numpy()
        else:
            got = model(Tensor.from_data(x)).to_numpy()
        np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-6)


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_a_scan_unrolls(onnx, ort, rng, device):
    helper = onnx.helper
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])],
        "body",
        [helper.make_tensor_value_info("s_in", F, [2]), helper.make_tensor_value_info("x_t", F, [2])],
        [helper.make_tensor_value_info("s_out", F, [2]), helper.make_tensor_value_info("y_t", F, [2])],
    )
    scan = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1, scan_input_axes=[1])
    data = onnx_model(onnx, [scan], [("s0", F, [2]), ("x", F, [2, 6])], [("s", F, [2]), ("ys", F, [6, 2])])
    dev = DEVICES[device]()
    model = ember.onnx.load(data, dev, compile=True)
    with no_fallback():
        for _ in range(2):
            s0, x = rng.standard_normal(2).astype(np.float32), rng.standard_normal((2, 6)).astype(np.float32)
            got = model(Tensor.from_data(s0, device=dev), Tensor.from_data(x, device=dev))
            for g, w in zip(got, run_ort(ort, data, s0, x)):
                np.testing.assert_allclose(g.to_numpy(), w, rtol=1e-5, atol=1e-6)
    assert model.stats["traces"] == 1 and model.stats["replays"] == 1
