"""Operators built on ember's existing ops: CumProd, Upsample, Compress, Unique, LpPool,
3-d MaxPool/AveragePool, If, the sequence operators and the two losses, against
onnxruntime (ONNX's reference evaluator for CumProd, newer than onnxruntime), with
gradients through the data-dependent ones on an autodiff device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from tests.onnx_import.helpers import onnx_model, run_ort
from tests.onnx_import.test_spec import reference, run_ember

F32, I64 = 1, 7


def node(onnx: Any, op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    return onnx.helper.make_node(op, inputs, outputs, **attrs)


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cum_prod(onnx, rng, exclusive, reverse):
    x = rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    x[1, 2] = 0
    axis = onnx.numpy_helper.from_array(np.array(1, np.int64), "axis")
    data = onnx_model(
        onnx,
        [node(onnx, "CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
        [("x", F32, [3, 4])],
        [("y", F32, [3, 4])],
        [axis],
        opset=26,
    )
    with pytest.warns(UserWarning, match="opset 26"):
        (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, reference(onnx, data, x)[0], rtol=1e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(onnx, ort, rng, mode):
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    scales = onnx.numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")
    data = onnx_model(
        onnx,
        [node(onnx, "Upsample", ["x", "scales"], ["y"], mode=mode)],
        [("x", F32, [1, 2, 3, 4])],
        [("y", F32, None)],
        [scales],
        opset=9,
    )
    (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_compress(onnx, ort, rng, axis):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    cond = np.array([True, False, True], bool)
    attrs = {} if axis is None else {"axis": axis}
    data = onnx_model(
        onnx,
        [node(onnx, "Compress", ["x", "c"], ["y"], **attrs)],
        [("x", F32, [3, 4]), ("c", 9, [3])],
        [("y", F32, None)],
    )
    (got,) = run_ember(data, x, cond)
    np.testing.assert_array_equal(got, run_ort(ort, data, x, cond)[0])
    # Differentiable with respect to the data: the gradient is one where a value was kept.
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    xe = Tensor.from_data(x, device=device).require_grad()
    grads = model(xe, Tensor.from_data(cond, device=device)).sum().backward()
    kept = np.zeros_like(x)
    chosen = np.nonzero(cond)[0]
    if axis is None:
        kept.reshape(-1)[chosen] = 1  # the flattened positions
    elif axis == 0:
        kept[chosen, :] = 1
    else:
        kept[:, chosen] = 1
    np.testing.assert_array_equal(xe.grad(grads).to_numpy(), kept)


@pytest.mark.parametrize(("axis", "is_sorted"), [(None, 1), (None, 0), (0, 1), (0, 0)])
def test_unique(onnx, ort, axis, is_sorted):
    x = np.array([[2.0, 1.0], [2.0, 1.0], [0.5, 3.0], [2.0, 1.0]], np.float32)
    attrs: dict[str, Any] = {"sorted": is_sorted}
    if axis is not None:
        attrs["axis"] = axis
    outputs = ["y", "indices", "inverse", "counts"]
    data = onnx_model(
        onnx,
        [node(onnx, "Unique", ["x"], outputs, **attrs)],
        [("x", F32, [4, 2])],
        [("y", F32, None)] + [(o, I64, None) for o in outputs[1:]],
    )
    got = run_ember(data, x)
    for g, w in zip(got, run_ort(ort, data, x)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(onnx, ort, rng, p):
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    attrs = {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "p": p}
    data = onnx_model(
        onnx, [node(onnx, "LpPool", ["x"], ["y"], **attrs)], [("x", F32, [1, 2, 5, 6])], [("y", F32, None)]
    )
    (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_3d_pooling(onnx, ort, rng, op, ceil_mode):
    x = rng.standard_normal((2, 3, 5, 6, 7)).astype(np.float32)
    attrs: dict[str, Any] = {
        "kernel_shape": [2, 3, 2],
        "strides": [2, 1, 2],
        "pads": [1, 1, 0, 0, 1, 1],
        "ceil_mode": ceil_mode,
    }
    if op == "AveragePool":
        attrs["count_include_pad"] = ceil_mode  # both divisors
    data = onnx_model(onnx, [node(onnx, op, ["x"], ["y"], **attrs)], [("x", F32, [2, 3, 5, 6, 7])], [("y", F32, None)])
    (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)


def _if_model(onnx: Any, cond: tuple[str, int, list[Any]] | None, const_cond: bool | None = None) -> bytes:
    """y = If(c) then x * 2 + w else x - w, reading x and w from the outer scope."""
    helper = onnx.helper
    then = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["t0"]), helper.make_node("Add", ["t0", "w"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", F32, [2, 3])],
        [onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two")],
    )
    other = helper.make_graph(
        [helper.make_node("Sub", ["x", "w"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F32, [2, 3])]
    )
    nodes = [helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)]
    inits = [onnx.numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")]
    inputs = [("x", F32, [2, 3])]
    if const_cond is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(const_cond), "c"))
    else:
        assert cond is not None
        inputs.append(cond)
    return onnx_model(onnx, nodes, inputs, [("y", F32, [2, 3])], inits)


@pytest.mark.parametrize("flag", [True, False])
def test_if_with_a_condition_known_at_load_inlines_the_branch(onnx, ort, rng, flag):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    data = _if_model(onnx, None, const_cond=flag)
    model = ember.onnx.load(data, Device.flex())
    assert not any("If" in step.label for step in model.program.steps)  # inlined
    got = model(Tensor.from_data(x)).to_numpy()
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-6)


def test_if_with_a_tensor_condition_runs_the_taken_branch_and_differentiates(onnx, ort, rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    data = _if_model(onnx, ("c", 9, []))
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    for flag in (True, False):
        c = np.array(flag)
        xe = Tensor.from_data(x, device=device).require_grad()
        out = model(xe, Tensor.from_data(c, device=device))
        np.testing.assert_allclose(out.to_numpy(), run_ort(ort, data, x, c)[0], rtol=1e-6)
        grads = out.sum().backward()
        np.testing.assert_allclose(xe.grad(grads).to_numpy(), np.full((2, 3), 2.0 if flag else 1.0))


def test_if_on_a_shape_chooses_per_call(onnx, ort, rng):
    """The condition computed from a dynamic dim (host arithmetic), as exporters write
    shape checks: each call takes the branch its input's shape selects."""
    helper = onnx.helper
    then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F32, None)]
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F32, None)]
    )
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
        helper.make_node("Greater", ["s", "three"], ["big"]),
        helper.make_node("Squeeze", ["big"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    three = onnx.numpy_helper.from_array(np.array([3], np.int64), "three")
    data = onnx_model(onnx, nodes, [("x", F32, ["n", 2])], [("y", F32, ["n", 2])], [three])
    model = ember.onnx.load(data, Device.flex())
    for n in (2, 5, 2):
        x = rng.standard_normal((n, 2)).astype(np.float32)
        np.testing.assert_allclose(model(Tensor.from_data(x)).to_numpy(), run_ort(ort, data, x)[0], rtol=1e-6)


def test_sequence_ops(onnx, ort, rng):
    """Split a tensor into a sequence, insert, erase, read one, count, concatenate and
    stack: against onnxruntime, and differentiable through the sequence."""
    helper = onnx.helper
    i64 = onnx.numpy_helper.from_array
    nodes = [
        helper.make_node("SplitToSequence", ["x", "two"], ["s0"], axis=1),  # chunks of 2 (the last of 1)
        helper.make_node("SequenceInsert", ["s0", "y", "one"], ["s1"]),
        helper.make_node("SequenceErase", ["s1", "minus_one"], ["s2"]),
        helper.make_node("SequenceAt", ["s2", "one"], ["at"]),
        helper.make_node("SequenceLength", ["s2"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["cat"], axis=1),
        helper.make_node("SequenceConstruct", ["y", "y"], ["pair"]),
        helper.make_node("ConcatFromSequence", ["pair"], ["stacked"], axis=0, new_axis=1),
    ]
    inits = [
        i64(np.array(2, np.int64), "two"),
        i64(np.array(1, np.int64), "one"),
        i64(np.array(-1, np.int64), "minus_one"),
    ]
    data = onnx_model(
        onnx,
        nodes,
        [("x", F32, [3, 5]), ("y", F32, [3, 2])],
        [("at", F32, [3, 2]), ("n", I64, []), ("cat", F32, [3, 6]), ("stacked", F32, [2, 3, 2])],
        inits,
    )
    x = rng.standard_normal((3, 5)).astype(np.float32)
    y = rng.standard_normal((3, 2)).astype(np.float32)
    got = run_ember(data, x, y)
    for g, w in zip(got, run_ort(ort, data, x, y)):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    xe = Tensor.from_data(x, device=device).require_grad()
    _, _, cat, _ = model(xe, Tensor.from_data(y, device=device))
    grads = cat.sum().backward()
    want = np.ones_like(x)
    want[:, 4] = 0  # the last chunk (column 4) was erased
    np.testing.assert_array_equal(xe.grad(grads).to_numpy(), want)


def test_a_sequence_input_takes_a_list_of_tensors(onnx, ort, rng):
    helper = onnx.helper
    seq = helper.make_tensor_sequence_value_info("xs", F32, ["n", 3])
    graph = helper.make_graph(
        [helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)],
        "g",
        [seq],
        [helper.make_tensor_value_info("y", F32, ["m", 3])],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    xs = [rng.standard_normal((n, 3)).astype(np.float32) for n in (1, 2)]
    model = ember.onnx.load(data, Device.flex())
    got = model([Tensor.from_data(a) for a in xs]).to_numpy()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, session.run(None, {"xs": xs})[0])


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy_and_nll_losses(onnx, ort, torch, rng, reduction):
    """Both losses with class weights and an ignored index, against onnxruntime; the
    gradient of the scores against torch's cross_entropy."""
    helper = onnx.helper
    scores = rng.standard_normal((4, 3, 2)).astype(np.float32)
    target = np.array([[0, 2], [1, -1], [2, 2], [-1, 0]], np.int64)
    weight = np.array([0.5, 1.0, 2.0], np.float32)
    attrs = {"reduction": reduction, "ignore_index": -1}
    nodes = [
        helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["sce", "logp"], **attrs),
        helper.make_node("NegativeLogLikelihoodLoss", ["logp", "t", "w"], ["nll"], **attrs),
    ]
    shape = [4, 2] if reduction == "none" else []
    data = onnx_model(
        onnx,
        nodes,
        [("x", F32, [4, 3, 2]), ("t", I64, [4, 2]), ("w", F32, [3])],
        [("sce", F32, shape), ("logp", F32, [4, 3, 2]), ("nll", F32, shape)],
    )
    got = run_ember(data, scores, target, weight)
    for g, w in zip(got, run_ort(ort, data, scores, target, weight)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    xe = Tensor.from_data(scores, device=device).require_grad()
    loss = model(xe, Tensor.from_data(target, device=device), Tensor.from_data(weight, device=device))[0]
    grads = loss.sum().backward()
    xt = torch.from_numpy(scores).requires_grad_()
    want = torch.nn.functional.cross_entropy(
        xt, torch.from_numpy(target), weight=torch.from_numpy(weight), ignore_index=-1, reduction=reduction
    )
    want.sum().backward()
    np.testing.assert_allclose(loss.to_numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(xe.grad(grads).to_numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_rms_normalization_and_swish(onnx, ort, rng):
    helper = onnx.helper
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    scale = onnx.numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "scale")
    nodes = [
        helper.make_node("RMSNormalization", ["x", "scale"], ["n"], axis=-1, epsilon=1e-4),
        helper.make_node("Swish", ["n"], ["y"], alpha=1.5),
    ]
    data = onnx_model(onnx, nodes, [("x", F32, [2, 3, 4])], [("y", F32, [2, 3, 4])], [scale], opset=24)
    with pytest.warns(UserWarning, match="opset 24"):
        (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, reference(onnx, data, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:.*newer than the opsets ember.onnx documents")
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_with_grouped_heads_a_mask_and_a_cache(onnx, ort, torch, rng, causal):
    """Opset 23's Attention against onnxruntime (4-d inputs, 4 query heads over 2 key/value
    heads, a boolean mask, past keys and values), and its gradient against torch's
    scaled_dot_product_attention."""
    helper = onnx.helper
    q = rng.standard_normal((2, 4, 3, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 3, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 3, 8)).astype(np.float32)
    pk = rng.standard_normal((2, 2, 2, 8)).astype(np.float32)
    pv = rng.standard_normal((2, 2, 2, 8)).astype(np.float32)
    mask = rng.random((3, 5)) > 0.3
    mask[:, 0] = True
    node_ = helper.make_node(
        "Attention", ["q", "k", "v", "m", "pk", "pv"], ["y", "present_k", "present_v"], is_causal=causal
    )
    data = onnx_model(
        onnx,
        [node_],
        [
            ("q", F32, [2, 4, 3, 8]),
            ("k", F32, [2, 2, 3, 8]),
            ("v", F32, [2, 2, 3, 8]),
            ("m", 9, [3, 5]),
            ("pk", F32, [2, 2, 2, 8]),
            ("pv", F32, [2, 2, 2, 8]),
        ],
        [("y", F32, [2, 4, 3, 8]), ("present_k", F32, [2, 2, 5, 8]), ("present_v", F32, [2, 2, 5, 8])],
        opset=23,
    )
    args = (q, k, v, mask, pk, pv)
    got = run_ember(data, *args)
    for g, w in zip(got, run_ort(ort, data, *args)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # Gradient with respect to the queries, against torch (the mask and the cache-aligned causal mask combined).
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    qe = Tensor.from_data(q, device=device).require_grad()
    y = model(qe, *[Tensor.from_data(a, device=device) for a in args[1:]])[0]
    grads = y.sum().backward()
    qt = torch.from_numpy(q).requires_grad_()
    allowed = torch.from_numpy(mask)
    if causal:
        allowed = allowed & torch.ones(3, 5, dtype=torch.bool).tril(2)
    keys = torch.cat([torch.from_numpy(pk), torch.from_numpy(k)], 2)
    values = torch.cat([torch.from_numpy(pv), torch.from_numpy(v)], 2)
    want = torch.nn.functional.scaled_dot_product_attention(qt, keys, values, attn_mask=allowed, enable_gqa=True)
    want.sum().backward()
    np.testing.assert_allclose(y.to_numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(qe.grad(grads).to_numpy(), qt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_loop_with_a_trip_count_a_condition_and_scan_outputs(onnx, ort, rng):
    """x <- x * w + i for i < M while sum(x) < limit, scanning each x: against
    onnxruntime, and differentiable through every iteration."""
    helper = onnx.helper
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["x_in", "w"], ["xw"]),
            helper.make_node("Cast", ["i"], ["i_f"], to=F32),
            helper.make_node("Add", ["xw", "i_f"], ["x_out"]),
            helper.make_node("ReduceSum", ["x_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["go"]),
            helper.make_node("Identity", ["x_out"], ["scan"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", 9, []),
            helper.make_tensor_value_info("x_in", F32, [3]),
        ],
        [
            helper.make_tensor_value_info("go", 9, []),
            helper.make_tensor_value_info("x_out", F32, [3]),
            helper.make_tensor_value_info("scan", F32, [3]),
        ],
    )
    inits = [
        onnx.numpy_helper.from_array(np.array(1.5, np.float32), "w"),
        onnx.numpy_helper.from_array(np.array(40.0, np.float32), "limit"),
        onnx.numpy_helper.from_array(np.array(6, np.int64), "m"),
        onnx.numpy_helper.from_array(np.array(True), "c0"),
    ]
    loop = helper.make_node("Loop", ["m", "c0", "x"], ["x_final", "xs"], body=body)
    data = onnx_model(onnx, [loop], [("x", F32, [3])], [("x_final", F32, [3]), ("xs", F32, None)], inits)
    x = rng.uniform(0.5, 1.0, 3).astype(np.float32)
    got = run_ember(data, x)
    want = run_ort(ort, data, x)
    assert 1 < want[1].shape[0] < 6  # the condition stopped it before the trip count
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    device = Device.flex().autodiff()
    xe = Tensor.from_data(x, device=device).require_grad()
    final, _ = ember.onnx.load(data, device)(xe)
    grads = final.sum().backward()
    np.testing.assert_allclose(xe.grad(grads).to_numpy(), np.full(3, 1.5 ** want[1].shape[0]), rtol=1e-6)


def test_scan_with_a_reversed_input_and_output(onnx, ort, rng):
    """A running sum over axis 1 of one input, read backward, with the partial sums
    stacked along axis 0 in reverse: against onnxruntime, and differentiable."""
    helper = onnx.helper
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body",
        [helper.make_tensor_value_info("s_in", F32, [2]), helper.make_tensor_value_info("x_t", F32, [2])],
        [helper.make_tensor_value_info("s_out", F32, [2]), helper.make_tensor_value_info("y_t", F32, [2])],
    )
    scan = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[1],
        scan_output_directions=[1],
    )
    data = onnx_model(onnx, [scan], [("s0", F32, [2]), ("x", F32, [2, 4])], [("s", F32, [2]), ("ys", F32, [4, 2])])
    s0, x = rng.standard_normal(2).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    got = run_ember(data, s0, x)
    for g, w in zip(got, run_ort(ort, data, s0, x)):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    device = Device.flex().autodiff()
    xe = Tensor.from_data(x, device=device).require_grad()
    s, _ = ember.onnx.load(data, device)(Tensor.from_data(s0, device=device), xe)
    grads = s.sum().backward()
    np.testing.assert_array_equal(xe.grad(grads).to_numpy(), np.ones_like(x))


@pytest.mark.filterwarnings("ignore:.*newer than the opsets ember.onnx documents")
@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding(onnx, ort, rng, interleaved):
    """Opset 23's RotaryEmbedding on a 3-d input with position ids and a partial rotary
    dim, against onnxruntime."""
    helper = onnx.helper
    x = rng.standard_normal((2, 3, 2 * 8)).astype(np.float32)
    cos = rng.standard_normal((10, 2)).astype(np.float32)
    sin = rng.standard_normal((10, 2)).astype(np.float32)
    positions = np.array([[0, 1, 2], [5, 6, 9]], np.int64)
    rope = helper.make_node(
        "RotaryEmbedding",
        ["x", "cos", "sin", "p"],
        ["y"],
        interleaved=interleaved,
        num_heads=2,
        rotary_embedding_dim=4,
    )
    data = onnx_model(
        onnx,
        [rope],
        [("x", F32, [2, 3, 16]), ("cos", F32, [10, 2]), ("sin", F32, [10, 2]), ("p", I64, [2, 3])],
        [("y", F32, [2, 3, 16])],
        opset=23,
    )
    (got,) = run_ember(data, x, cos, sin, positions)
    np.testing.assert_allclose(got, run_ort(ort, data, x, cos, sin, positions)[0], rtol=1e-5, atol=1e-6)


def test_optional_values(onnx, ort, rng):
    """An optional input given or empty (None), OptionalHasElement, and Optional /
    OptionalGetElement around a tensor: against onnxruntime."""
    helper = onnx.helper
    opt = helper.make_value_info("o", helper.make_optional_type_proto(helper.make_tensor_type_proto(F32, [2])))
    graph = helper.make_graph(
        [
            helper.make_node("OptionalHasElement", ["o"], ["has"]),
            helper.make_node("Optional", ["x"], ["wrapped"]),
            helper.make_node("OptionalGetElement", ["wrapped"], ["y"]),
        ],
        "g",
        [opt, helper.make_tensor_value_info("x", F32, [2])],
        [helper.make_tensor_value_info("has", 9, []), helper.make_tensor_value_info("y", F32, [2])],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8).SerializeToString()
    model = ember.onnx.load(data, Device.flex())
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = rng.standard_normal(2).astype(np.float32)
    for given in (x + 1, None):
        has, y = model(None if given is None else Tensor.from_data(given), Tensor.from_data(x))
        want = session.run(None, {"o": given, "x": x})
        assert bool(has.to_numpy()) == bool(want[0]) == (given is not None)
        np.testing.assert_array_equal(y.to_numpy(), want[1])


def test_center_crop_pad_reverse_sequence_and_windows(onnx, ort, rng):
    helper = onnx.helper
    i64 = onnx.numpy_helper.from_array
    nodes = [
        helper.make_node("CenterCropPad", ["x", "shape"], ["cropped"], axes=[0, 2]),
        helper.make_node("ReverseSequence", ["x", "lens"], ["reversed"], batch_axis=1, time_axis=0),
        helper.make_node("HannWindow", ["n"], ["hann"]),
        helper.make_node("HammingWindow", ["n"], ["hamming"], periodic=0),
        helper.make_node("BlackmanWindow", ["n"], ["blackman"]),
    ]
    inits = [
        i64(np.array([2, 7], np.int64), "shape"),
        i64(np.array([4, 1, 0], np.int64), "lens"),
        i64(np.array(6, np.int64), "n"),
    ]
    outputs = [("cropped", F32, [2, 3, 7]), ("reversed", F32, [5, 3, 4])] + [
        (w, F32, [6]) for w in ("hann", "hamming", "blackman")
    ]
    data = onnx_model(onnx, nodes, [("x", F32, [5, 3, 4])], outputs, inits, opset=18)
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    for g, w in zip(run_ember(data, x), run_ort(ort, data, x)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_scatter_and_swiglu(onnx, ort, rng):
    """Scatter (opset 10's name of ScatterElements) against onnxruntime; SwiGLU (opset 28)
    against ONNX's reference."""
    helper = onnx.helper
    x = rng.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[1, 0, 2, 3]], np.int64)
    upd = rng.standard_normal((1, 4)).astype(np.float32)
    data = onnx_model(
        onnx,
        [helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)],
        [("x", F32, [3, 4]), ("i", I64, [1, 4]), ("u", F32, [1, 4])],
        [("y", F32, [3, 4])],
        opset=10,
    )
    np.testing.assert_array_equal(run_ember(data, x, idx, upd)[0], run_ort(ort, data, x, idx, upd)[0])
    b = rng.standard_normal((3, 4)).astype(np.float32)
    data = onnx_model(
        onnx,
        [helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.702)],
        [("a", F32, [3, 4]), ("b", F32, [3, 4])],
        [("y", F32, [3, 4])],
        opset=28,
    )
    with pytest.warns(UserWarning, match="opset 28"):
        (got,) = run_ember(data, x, b)
    np.testing.assert_allclose(got, reference(onnx, data, x, b)[0], rtol=1e-6)


@pytest.mark.parametrize(("include_pad", "ceil_mode"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_dilated_average_pool(onnx, ort, rng, include_pad, ceil_mode):
    x = rng.standard_normal((1, 2, 7, 8)).astype(np.float32)
    attrs = {
        "kernel_shape": [2, 3],
        "strides": [2, 2],
        "dilations": [2, 2],
        "pads": [1, 0, 1, 1],
        "count_include_pad": include_pad,
        "ceil_mode": ceil_mode,
    }
    data = onnx_model(
        onnx,
        [node(onnx, "AveragePool", ["x"], ["y"], **attrs)],
        [("x", F32, [1, 2, 7, 8])],
        [("y", F32, None)],
        opset=19,
    )
    (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)


def test_col2im_and_max_unpool(onnx, ort, rng):
    """Col2Im with asymmetric pads, and MaxPool's indices put back by MaxUnpool into a
    larger output_shape: against onnxruntime."""
    helper = onnx.helper
    i64 = onnx.numpy_helper.from_array
    cols = rng.standard_normal((1, 2 * 4, 12)).astype(np.float32)  # 2 channels, 2x2 blocks, 3x4 of them
    data = onnx_model(
        onnx,
        [helper.make_node("Col2Im", ["c", "image", "block"], ["y"], pads=[0, 1, 1, 0], strides=[2, 1])],
        [("c", F32, [1, 8, 12])],
        [("y", F32, [1, 2, 5, 4])],
        [i64(np.array([5, 4], np.int64), "image"), i64(np.array([2, 2], np.int64), "block")],
        opset=18,
    )
    np.testing.assert_allclose(run_ember(data, cols)[0], run_ort(ort, data, cols)[0], rtol=1e-6)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    for shape in (None, [2, 3, 5, 5]):
        inputs = ["p", "i"] + (["shape"] if shape else [])
        nodes = [
            helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("MaxUnpool", inputs, ["y"], kernel_shape=[2, 2], strides=[2, 2]),
        ]
        inits = [i64(np.array(shape, np.int64), "shape")] if shape else []
        data = onnx_model(onnx, nodes, [("x", F32, [2, 3, 4, 4])], [("y", F32, shape or [2, 3, 4, 4])], inits)
        # With output_shape, onnxruntime reads the indices in the larger plane; the spec's
        # reference (which ember follows) reads them in the unpooled one, zeros added after.
        want = reference(onnx, data, x) if shape else run_ort(ort, data, x)
        np.testing.assert_array_equal(run_ember(data, x)[0], want[0])
