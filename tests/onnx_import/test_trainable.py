"""Only weights train: the rule that makes an initializer a ``Param`` or a constant
(``ember.onnx.trainable``), ``load(..., trainable=)``, ``describe_params``, and
fine-tuning imported transformers exports (GPT-2, LLaMA, BERT, ViT, T5) without NaN,
with their constants as ``Constant`` nodes (torch's TorchScript exporter) and as
initializers (the dynamo exporter, onnxsim, onnxruntime's optimizers)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import ember
import ember.onnx
from ember import Device, Tensor
from ember.errors import UsageError
from ember.module import ParamGroup
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamWConfig, GradientsParams
from tests.onnx_import import models
from tests.onnx_import.helpers import constants_as_initializers, export, import_onnx, onnx_model, run_ort

F = 1  # TensorProto.FLOAT
I64 = 7  # TensorProto.INT64


def init(onnx, name: str, array) -> object:
    return onnx.numpy_helper.from_array(np.asarray(array), name)


def node(onnx, op: str, inputs: list[str], outputs: list[str], **attrs) -> object:
    return onnx.helper.make_node(op, inputs, outputs, **attrs)


def roles(model) -> dict[str, str]:
    return {r.name: r.role for r in model.describe_params()}


def rng_array(shape, seed: int = 0, scale: float = 0.5) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# ---------------------------------------------------------------------- the rule on small graphs
def test_scalars_masks_and_tables_are_constants(onnx, ort):
    """GELU's tanh form (a scalar exponent and coefficients), an attention mask filled with
    finfo(float32).min, a folded rotary table and a rank-1 frequency vector: constants,
    folded or fed to the tensor ops, never parameters."""
    t, d = 4, 8
    mask = np.triu(np.full((t, t), np.finfo(np.float32).min, np.float32), 1)
    cos = np.cos(np.arange(t * d, dtype=np.float32).reshape(t, d) / 7)
    freq = (1.0 / 10000 ** (np.arange(d) / d)).astype(np.float32)
    nodes = [
        node(onnx, "Pow", ["x", "three"], ["cube"]),
        node(onnx, "Mul", ["cube", "coef"], ["c1"]),
        node(onnx, "Add", ["x", "c1"], ["inner"]),
        node(onnx, "Mul", ["inner", "half"], ["g"]),
        node(onnx, "Mul", ["g", "cos"], ["rot"]),  # a folded rotary table
        node(onnx, "Mul", ["rot", "freq"], ["scaled"]),  # a rank-1 vector, not after a normalization
        node(onnx, "MatMul", ["scaled", "scaled_t"], ["scores"]),
        node(onnx, "Add", ["scores", "mask"], ["masked"]),
        node(onnx, "Softmax", ["masked"], ["y"], axis=-1),
    ]
    nodes.insert(6, node(onnx, "Transpose", ["scaled"], ["scaled_t"], perm=[1, 0]))
    inits = [
        init(onnx, "three", np.float32(3.0)),
        init(onnx, "coef", np.array([0.044715], np.float32)),
        init(onnx, "half", np.float32(0.5)),
        init(onnx, "cos", cos),
        init(onnx, "freq", freq),
        init(onnx, "mask", mask),
    ]
    data = onnx_model(onnx, nodes, [("x", F, [t, d])], [("y", F, [t, t])], inits)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    assert model.weights == {} and model.num_params() == 0
    assert roles(model) == dict.fromkeys(["three", "coef", "half", "cos", "freq", "mask"], "constant")
    reasons = {r.name: r.reason for r in model.describe_params()}
    assert reasons["three"] == "a scalar read by Pow: no weight input"
    assert "rank-2 constant read by Mul" in reasons["cos"]
    assert "rank-2 constant read by Add" in reasons["mask"]
    x = rng_array((t, d))
    np.testing.assert_allclose(
        model(Tensor.from_data(x, device=device)).to_numpy(), run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6
    )


def test_linear_weights_and_biases_train(onnx):
    """MatMul/Gemm operands of rank >= 2 and the bias added after them (either order, and
    through a Transpose), Gemm's C, Conv's weight and bias, PRelu's slope."""
    nodes = [
        node(onnx, "Conv", ["img", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
        node(onnx, "PRelu", ["c", "slope"], ["p"]),
        node(onnx, "Flatten", ["p"], ["flat"]),
        node(onnx, "Gemm", ["flat", "fc_w", "fc_b"], ["h"], transB=1),
        node(onnx, "MatMul", ["h", "w1"], ["m1"]),
        node(onnx, "Add", ["b1", "m1"], ["a1"]),  # torch writes the bias first
        node(onnx, "Transpose", ["w2_t"], ["w2"], perm=[1, 0]),
        node(onnx, "MatMul", ["a1", "w2"], ["m2"]),
        node(onnx, "Add", ["m2", "b2"], ["y"]),
    ]
    inits = [
        init(onnx, "conv_w", rng_array((2, 1, 3, 3), 1)),
        init(onnx, "conv_b", rng_array((2,), 2)),
        init(onnx, "slope", rng_array((2, 1, 1), 3)),
        init(onnx, "fc_w", rng_array((6, 32), 4)),
        init(onnx, "fc_b", rng_array((6,), 5)),
        init(onnx, "w1", rng_array((6, 5), 6)),
        init(onnx, "b1", rng_array((5,), 7)),
        init(onnx, "w2_t", rng_array((3, 5), 8)),
        init(onnx, "b2", rng_array((3,), 9)),
    ]
    data = onnx_model(onnx, nodes, [("img", F, [2, 1, 4, 4])], [("y", F, [2, 3])], inits)
    model = ember.onnx.load(data, Device.flex().autodiff())
    assert set(model.weights) == {i.name for i in inits}
    reasons = {r.name: r.reason for r in model.describe_params()}
    assert reasons["conv_w"] == "Conv weight" and reasons["conv_b"] == "Conv bias"
    assert reasons["fc_w"] == "Gemm weight" and reasons["fc_b"] == "Gemm bias"
    assert reasons["b1"] == "bias of a MatMul" and reasons["b2"] == "bias of a MatMul"
    assert reasons["w2_t"] == "MatMul weight" and reasons["slope"] == "PRelu slope"


def test_a_bias_or_scale_elsewhere_is_a_constant(onnx):
    """A rank-1 initializer added to a MatMul of two activations (no weight operand), or
    multiplied into a value that is not normalized, is a constant."""
    nodes = [
        node(onnx, "MatMul", ["x", "x_t"], ["s"]),
        node(onnx, "Add", ["s", "offset"], ["a"]),
        node(onnx, "Mul", ["a", "gain"], ["y"]),
    ]
    nodes.insert(0, node(onnx, "Transpose", ["x"], ["x_t"], perm=[1, 0]))
    inits = [init(onnx, "offset", rng_array((4,), 1)), init(onnx, "gain", rng_array((4,), 2))]
    data = onnx_model(onnx, nodes, [("x", F, [4, 3])], [("y", F, [4, 4])], inits)
    assert roles(ember.onnx.load(data)) == {"offset": "constant", "gain": "constant"}


def test_normalization_scales_and_biases_train(onnx, ort):
    """LayerNormalization's scale and bias; RMSNorm written out (LLaMA's and T5's
    ``w * (x * rsqrt(mean(x^2) + eps))``) and LayerNorm written out (older opsets:
    ``(x - mean) / sqrt(var + eps) * w + b``): the rank-1 Mul and Add train, the exponent
    and epsilon stay constants. BatchNormalization's scale and bias train; its running
    statistics are states."""
    d = 6
    nodes = [
        node(onnx, "LayerNormalization", ["x", "ln_w", "ln_b"], ["l"], axis=-1),
        # RMSNorm
        node(onnx, "Pow", ["l", "two"], ["sq"]),
        node(onnx, "ReduceMean", ["sq"], ["ms"], axes=[-1]),
        node(onnx, "Add", ["ms", "eps"], ["mse"]),
        node(onnx, "Sqrt", ["mse"], ["rms"]),
        node(onnx, "Reciprocal", ["rms"], ["inv"]),
        node(onnx, "Mul", ["l", "inv"], ["normed"]),
        node(onnx, "Mul", ["rms_w", "normed"], ["r"]),
        # LayerNorm written out
        node(onnx, "ReduceMean", ["r"], ["mean"], axes=[-1]),
        node(onnx, "Sub", ["r", "mean"], ["centred"]),
        node(onnx, "Pow", ["centred", "two2"], ["sq2"]),
        node(onnx, "ReduceMean", ["sq2"], ["var"], axes=[-1]),
        node(onnx, "Add", ["var", "eps2"], ["vare"]),
        node(onnx, "Sqrt", ["vare"], ["std"]),
        node(onnx, "Div", ["centred", "std"], ["z"]),
        node(onnx, "Mul", ["z", "dec_w"], ["zw"]),
        node(onnx, "Add", ["zw", "dec_b"], ["y"]),
    ]
    inits = [
        init(onnx, "ln_w", rng_array((d,), 1) + 1),
        init(onnx, "ln_b", rng_array((d,), 2)),
        init(onnx, "two", np.float32(2)),
        init(onnx, "eps", np.float32(1e-6)),
        init(onnx, "rms_w", rng_array((d,), 3) + 1),
        init(onnx, "two2", np.float32(2)),
        init(onnx, "eps2", np.float32(1e-5)),
        init(onnx, "dec_w", rng_array((d,), 4) + 1),
        init(onnx, "dec_b", rng_array((d,), 5)),
    ]
    data = onnx_model(onnx, nodes, [("x", F, [3, d])], [("y", F, [3, d])], inits, opset=17)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    assert set(model.weights) == {"ln_w", "ln_b", "rms_w", "dec_w", "dec_b"}
    assert roles(model)["two"] == roles(model)["eps"] == roles(model)["eps2"] == "constant"
    reasons = {r.name: r.reason for r in model.describe_params()}
    assert reasons["ln_w"] == "LayerNormalization scale" and reasons["ln_b"] == "LayerNormalization bias"
    assert reasons["rms_w"] == reasons["dec_w"] == "scale of a normalization"
    assert reasons["dec_b"] == "bias of a normalization"
    x = rng_array((3, d), 6, 2.0)
    np.testing.assert_allclose(
        model(Tensor.from_data(x, device=device)).to_numpy(), run_ort(ort, data, x)[0], rtol=1e-4, atol=1e-5
    )

    bn = [node(onnx, "BatchNormalization", ["img", "s", "b", "mean", "var"], ["y"])]
    stats = [
        init(onnx, "s", rng_array((3,), 1) + 1),
        init(onnx, "b", rng_array((3,), 2)),
        init(onnx, "mean", rng_array((3,), 3)),
        init(onnx, "var", np.abs(rng_array((3,), 4)) + 1),
    ]
    data = onnx_model(onnx, bn, [("img", F, [2, 3, 4, 4])], [("y", F, [2, 3, 4, 4])], stats)
    model = ember.onnx.load(data, Device.flex().autodiff())
    assert roles(model) == {"s": "trains", "b": "trains", "mean": "state", "var": "state"}


def test_embedding_gather_trains_a_constant_gather_does_not(onnx):
    """Gather on axis 0 of a table with indices from a graph input (or computed) is an
    embedding; with constant indices (a positional slice) or on another axis it is a
    constant."""
    nodes = [
        node(onnx, "Gather", ["table", "ids"], ["e"], axis=0),
        node(onnx, "Add", ["ids", "one"], ["shifted"]),
        node(onnx, "Gather", ["table2", "shifted"], ["e2"], axis=0),
        node(onnx, "Gather", ["positions", "pos_ids"], ["p"], axis=0),
        node(onnx, "Gather", ["cols", "ids"], ["c"], axis=1),
        node(onnx, "Add", ["e", "e2"], ["s"]),
        node(onnx, "Add", ["s", "p"], ["y"]),
    ]
    inits = [
        init(onnx, "table", rng_array((10, 4), 1)),
        init(onnx, "table2", rng_array((11, 4), 2)),
        init(onnx, "one", np.array(1, np.int64)),
        init(onnx, "positions", rng_array((8, 4), 3)),
        init(onnx, "pos_ids", np.arange(3, dtype=np.int64)),
        init(onnx, "cols", rng_array((4, 10), 4)),
    ]
    data = onnx_model(onnx, nodes, [("ids", I64, [3])], [("y", F, [3, 4]), ("c", F, [4, 3])], inits)
    model = ember.onnx.load(data, Device.flex().autodiff())
    assert roles(model) == {"table": "trains", "table2": "trains", "positions": "constant", "cols": "constant"}
    reasons = {r.name: r.reason for r in model.describe_params()}
    assert reasons["table"] == "embedding (Gather on axis 0 with computed indices)"
    assert reasons["positions"] == "a rank-2 constant read by Gather: no weight input"


# ---------------------------------------------------------------------- trainable=, describe_params, records
def linear_with_constants(onnx) -> bytes:
    nodes = [
        node(onnx, "Gather", ["emb", "ids"], ["e"], axis=0),
        node(onnx, "Add", ["e", "pos"], ["ep"]),
        node(onnx, "MatMul", ["ep", "w"], ["m"]),
        node(onnx, "Add", ["m", "b"], ["a"]),
        node(onnx, "Mul", ["a", "scale"], ["s"]),
        node(onnx, "Add", ["s", "mask"], ["y"]),
    ]
    inits = [
        init(onnx, "emb", rng_array((10, 4), 1)),
        init(onnx, "pos", rng_array((3, 4), 2)),
        init(onnx, "w", rng_array((4, 5), 3)),
        init(onnx, "b", rng_array((5,), 4)),
        init(onnx, "scale", np.float32(0.125)),
        init(onnx, "mask", np.array([0, 0, 0, 0, -np.inf], np.float32)),
    ]
    return onnx_model(onnx, nodes, [("ids", I64, [3])], [("y", F, [3, 5])], inits)


def test_trainable_overrides_the_rule(onnx):
    data = linear_with_constants(onnx)
    assert set(ember.onnx.load(data).weights) == {"emb", "w", "b"}
    # A ParamGroup over the paths weights.<name>: exactly what it selects (never a mask).
    model = ember.onnx.load(data, trainable=ParamGroup.all())
    assert set(model.weights) == {"emb", "pos", "w", "b", "scale"}
    assert "never trains" in {r.name: r.reason for r in model.describe_params()}["mask"]
    model = ember.onnx.load(data, trainable=ParamGroup.paths(["weights.w"]) | ParamGroup.contains("emb"))
    assert set(model.weights) == {"emb", "w"}
    # A callable sees the rule's answer, the consumers, the shape and the dtype.
    seen = {}

    def decide(name, info):
        seen[name] = info
        return info.default or name == "pos"

    model = ember.onnx.load(data, trainable=decide)
    assert set(model.weights) == {"emb", "pos", "w", "b"}
    assert seen["pos"] == ember.onnx.InitializerInfo(
        "pos", (3, 4), "float32", ("Add",), False, "a rank-2 constant read by Add: no weight input"
    )
    assert seen["w"].default and seen["w"].consumers == ("MatMul",) and seen["w"].reason == "MatMul weight"
    assert "ids" not in seen  # only float initializers the tensors read are asked about
    with pytest.raises(UsageError, match="must return True or False"):
        ember.onnx.load(data, trainable=lambda name, info: "yes")
    with pytest.raises(UsageError, match="trainable= takes a ParamGroup"):
        ember.onnx.load(data, trainable=True)


def test_describe_params_constants_records_and_optimizers(onnx, ort, tmp_path):
    """Constants are no Params: num_params, the optimizer and save_file see the weights
    only; the outputs match onnxruntime after load_file; a frozen weight is listed as
    frozen."""
    data = linear_with_constants(onnx)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    report = model.describe_params()
    assert report.trainable == ["emb", "w", "b"] and report.constants == ["pos", "scale", "mask"]
    assert [r.path for r in report] == ["weights.emb", None, "weights.w", "weights.b", None, None]
    text = str(report)
    assert text.splitlines()[0].startswith("3 trainable initializer(s) (65 values), 0 frozen, 3 constant (18 values)")
    assert "  trains   emb    float32[10, 4]  embedding (Gather on axis 0 with computed indices)" in text
    assert model.num_params() == 40 + 20 + 5
    ids = np.array([1, 7, 3], np.int64)
    x = Tensor.from_data(ids, device=device)
    loss = model(x)[:, :4].square().mean()  # the last column is masked to -inf
    grads = GradientsParams.from_grads(loss.backward(), model)
    assert len(grads) == 3
    model = AdamWConfig().init().step(1e-2, model, grads)
    model.save_file(tmp_path / "tuned.safetensors")
    fresh = ember.onnx.load(data, device).load_file(tmp_path / "tuned.safetensors")  # strict: the same keys
    assert set(fresh.to_record()) == {"weights.emb", "weights.w", "weights.b"}
    np.testing.assert_array_equal(fresh(x).to_numpy(), model(x).to_numpy())
    frozen = model.freeze(ParamGroup.paths(["weights.emb"]))
    assert {r.name: r.role for r in frozen.describe_params()}["emb"] == "frozen"
    described = ember.onnx.describe(data)  # the rule, without loading
    assert described.weights == ["emb", "w", "b"] and described.weight_values == 65
    assert "initializers: 6 (83 values), 3 of them weights that train by default (65 values" in str(described)
    untouched = ember.onnx.load(data)
    np.testing.assert_allclose(untouched(Tensor.from_data(ids)).to_numpy(), run_ort(ort, data, ids)[0], rtol=1e-6)


# ---------------------------------------------------------------------- fine-tuning transformers exports
@functools.cache
def transformer_export(kind: str, lifted: bool) -> bytes:
    if lifted:
        return constants_as_initializers(import_onnx("onnx"), transformer_export(kind, False))
    from tests.models.hf import import_transformers

    transformers = import_transformers()
    import torch

    net, args = models.transformer(torch, transformers, kind)
    names = ["x"] if len(args) == 1 else ["x", "decoder_ids"]
    return export(torch, net, args, input_names=names)


def fine_tune(model, inputs, labels, steps: int = 20) -> list[float]:
    optim = AdamWConfig(weight_decay=0.01).init()
    loss_fn = CrossEntropyLoss()
    losses = []
    for _ in range(steps):
        logits = model(*inputs)
        classes = logits.dims()[-1]
        loss = loss_fn.forward(logits.reshape([-1, classes]), labels)
        grads = GradientsParams.from_grads(loss.backward(), model)
        model = optim.step(3e-3, model, grads)
        losses.append(loss.into_scalar())
    return losses


@pytest.mark.parametrize("lifted", [False, True], ids=["constant-nodes", "constants-as-initializers"])
@pytest.mark.parametrize("kind", models.TRANSFORMERS)
def test_fine_tuning_transformers_exports_lowers_the_loss(torch, kind, lifted):
    """20 AdamW steps on a fixed batch: the loss is finite at every step and falls. With
    the constants written as initializers, every constant stays one (before the rule,
    GPT-2's GELU exponent, LLaMA's and T5's RMSNorm exponents trained: NaN at step 2)."""
    import_onnx("onnx")
    data = transformer_export(kind, lifted)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    report = model.describe_params()
    if lifted:  # the same weights as the export with Constant nodes
        assert report.trainable == ember.onnx.load(transformer_export(kind, False)).describe_params().trainable
        assert report.constants  # scalars, masks, tables
    rng = np.random.default_rng(0)
    if kind == "vit":
        inputs = [rng.standard_normal((2, 3, 16, 16)).astype(np.float32)]
        labels = rng.integers(0, 5, 2)
    elif kind == "t5":
        inputs = [rng.integers(0, 97, (2, 8)), rng.integers(0, 97, (2, 6))]
        labels = rng.integers(0, 97, 12)
    else:
        inputs = [rng.integers(0, 97, (2, 8))]
        labels = rng.integers(0, 97, 16)
    constants = {r.name for r in report if r.role == "constant"}
    assert not constants & set(model.weights)
    losses = fine_tune(
        model,
        [Tensor.from_data(a, device=device) for a in inputs],
        Tensor.from_data(labels.astype(np.int64), device=device),
    )
    assert all(np.isfinite(losses)), losses
    assert losses[-1] < 0.8 * losses[0], losses
