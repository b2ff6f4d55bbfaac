"""The weight rule inside subgraphs: a ``Loop`` or ``Scan`` body's and an ``If``
branch's initializers train when the subgraph reads them as weights (and a main-graph
weight read only inside a body trains too), the rest stay constants; the forward
matches onnxruntime and the body weights' gradients match torch's."""

from __future__ import annotations

import numpy as np

import ember
import ember.onnx
from ember import Device, Tensor
from ember.optim import AdamWConfig, GradientsParams
from tests.onnx_import.helpers import onnx_model, run_ort

F = 1  # TensorProto.FLOAT
I64 = 7
BOOL = 9
STEPS = 3


def weights(seed: int) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    return {
        "w_body": (g.standard_normal((4, 4)) * 0.5).astype(np.float32),
        "b_body": (g.standard_normal(4) * 0.1).astype(np.float32),
        "w_out": (g.standard_normal((4, 3)) * 0.5).astype(np.float32),
        "conv_w": (g.standard_normal((1, 1, 3)) * 0.5).astype(np.float32),
        "w_scan": (g.standard_normal((4, 4)) * 0.5).astype(np.float32),
    }


def subgraph_model(onnx, w: dict[str, np.ndarray]) -> bytes:
    """h <- tanh(h @ w_body + b_body) * 0.5 for 3 iterations (Loop; the body's own
    initializers, a scalar among them), then If(flag): Conv1d by a branch initializer, else
    a mask (a branch constant); then a Scan over the rows, s <- s + x_t @ w_scan (a Scan body
    initializer); then @ w_out (a main-graph initializer read only inside the else branch...
    and the main graph). Outputs y [2, 3] and the scan sum [4]."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["h_in", "w_body"], ["hw"]),
            helper.make_node("Add", ["hw", "b_body"], ["hb"]),
            helper.make_node("Tanh", ["hb"], ["ht"]),
            helper.make_node("Mul", ["ht", "half"], ["h_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c_in", BOOL, []),
            helper.make_tensor_value_info("h_in", F, [2, 4]),
        ],
        [helper.make_tensor_value_info("c_out", BOOL, []), helper.make_tensor_value_info("h_out", F, [2, 4])],
        [
            numpy_helper.from_array(w["w_body"], "w_body"),
            numpy_helper.from_array(w["b_body"], "b_body"),
            numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        ],
    )
    then = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["h", "axis1"], ["h3"]),
            helper.make_node("Conv", ["h3", "conv_w"], ["conv"], pads=[1, 1]),
            helper.make_node("Squeeze", ["conv", "axis1"], ["t"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, [2, 4])],
        [numpy_helper.from_array(w["conv_w"], "conv_w"), numpy_helper.from_array(np.array([1], np.int64), "axis1")],
    )
    other = helper.make_graph(
        [helper.make_node("Mul", ["h", "mask"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F, [2, 4])],
        [numpy_helper.from_array(np.array([1, 0, 1, 0.5], np.float32), "mask")],
    )
    scan_body = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["x_t", "axis0"], ["x_row"]),
            helper.make_node("MatMul", ["x_row", "w_scan"], ["xw_row"]),
            helper.make_node("Squeeze", ["xw_row", "axis0"], ["xw"]),
            helper.make_node("Add", ["s_in", "xw"], ["s_out"]),
        ],
        "scan_body",
        [helper.make_tensor_value_info("s_in", F, [4]), helper.make_tensor_value_info("x_t", F, [4])],
        [helper.make_tensor_value_info("s_out", F, [4])],
        [numpy_helper.from_array(w["w_scan"], "w_scan"), numpy_helper.from_array(np.array([0], np.int64), "axis0")],
    )
    nodes = [
        helper.make_node("Loop", ["trips", "", "x"], ["h"], body=body),
        helper.make_node("If", ["flag"], ["g"], then_branch=then, else_branch=other),
        helper.make_node("Scan", ["s0", "g"], ["s"], body=scan_body, num_scan_inputs=1),
        helper.make_node("MatMul", ["g", "w_out"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(STEPS, np.int64), "trips"),
        numpy_helper.from_array(np.zeros(4, np.float32), "s0"),
        numpy_helper.from_array(w["w_out"], "w_out"),
    ]
    inputs = [("x", F, [2, 4]), ("flag", BOOL, [])]
    return onnx_model(onnx, nodes, inputs, [("y", F, [2, 3]), ("s", F, [4])], inits)


def torch_forward(torch, w: dict, x, flag: bool):
    h = x
    for _ in range(STEPS):
        h = torch.tanh(h @ w["w_body"] + w["b_body"]) * 0.5
    if flag:
        g = torch.nn.functional.conv1d(h.unsqueeze(1), w["conv_w"], padding=1).squeeze(1)
    else:
        g = h * torch.tensor([1, 0, 1, 0.5])
    s = (g @ w["w_scan"]).sum(0)
    return g @ w["w_out"], s


def test_subgraph_weights_train_and_constants_do_not(onnx, ort, torch, rng):
    w = weights(1)
    data = subgraph_model(onnx, w)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    roles = {r.name: (r.role, r.reason) for r in model.describe_params()}
    assert roles["w_body"] == ("trains", "MatMul weight")
    assert roles["b_body"] == ("trains", "bias of a MatMul")
    assert roles["conv_w"] == ("trains", "Conv weight")
    assert roles["w_scan"] == ("trains", "MatMul weight")
    assert roles["w_out"] == ("trains", "MatMul weight")
    assert roles["half"][0] == "constant" and roles["mask"][0] == "constant"
    assert set(model.weights) == {"w_body", "b_body", "conv_w", "w_scan", "w_out"}
    assert sorted(ember.onnx.describe(data).weights) == sorted(model.weights)  # the rule without loading
    x = rng.standard_normal((2, 4)).astype(np.float32)
    for flag in (True, False):
        xe = Tensor.from_data(x, device=device)
        y, s = model(xe, Tensor.from_data(np.array(flag), device=device))
        want = run_ort(ort, data, x, np.array(flag))
        np.testing.assert_allclose(y.to_numpy(), want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s.to_numpy(), want[1], rtol=1e-5, atol=1e-6)
        grads = (y.square().sum() + s.sum()).backward()
        tw = {k: torch.tensor(v, requires_grad=True) for k, v in w.items()}
        ty, ts = torch_forward(torch, tw, torch.tensor(x), flag)
        (ty.square().sum() + ts.sum()).backward()
        for name, param in model.weights.items():
            got = param.val().grad(grads)
            if not flag and name == "conv_w":  # the branch not taken reads it: no gradient
                assert got is None or not np.any(got.to_numpy())
                continue
            assert got is not None, name
            np.testing.assert_allclose(got.to_numpy(), tw[name].grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_fine_tuning_through_a_loop_body_lowers_the_loss(onnx, rng):
    data = subgraph_model(onnx, weights(2))
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    x = Tensor.from_data(rng.standard_normal((2, 4)).astype(np.float32), device=device)
    target = Tensor.from_data(rng.standard_normal((2, 3)).astype(np.float32), device=device)
    flag = Tensor.from_data(np.array(True), device=device)
    before = model.weights["w_body"].val().to_numpy()
    optim = AdamWConfig().init()
    losses = []
    for _ in range(10):
        y, _ = model(x, flag)
        loss = (y - target).square().mean()
        model = optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model))
        losses.append(loss.into_scalar())
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert not np.array_equal(model.weights["w_body"].val().to_numpy(), before)  # the body's weight moved
