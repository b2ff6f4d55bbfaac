"""``Module.quantize``: which layers it takes, what the result can do (forward on every
device, records, ``to_device``, ``valid``), static calibration, and its errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ember import Device, Distribution, Tensor
from ember.errors import ConfigError
from ember.module import Module
from ember.module.safetensors_file import read_safetensors
from ember.nn import Conv2d, Conv2dConfig, Embedding, EmbeddingConfig, Linear, LinearConfig, Relu
from ember.quantization import (
    ParamGroup,
    QuantizedConv2d,
    QuantizedLinear,
    QuantScheme,
    schemes_of,
)


class Net(Module):
    embed: Embedding
    conv: Conv2d
    blocks: list
    act: Relu
    head: Linear

    @classmethod
    def new(cls, device: Device) -> Net:
        device.seed(7)
        return cls(
            embed=EmbeddingConfig(10, 64).init(device),
            conv=Conv2dConfig((2, 4), 4).init(device),  # 2 * 4 * 4 = 32 inputs per output channel
            blocks=[LinearConfig(64, 64).init(device), LinearConfig(64, 64).init(device)],
            act=Relu(),
            head=LinearConfig(64, 5).init(device),
        )

    def forward(self, x: Tensor, image: Tensor | None = None) -> Tensor:
        for block in self.blocks:
            x = self.act(block(x))
        out = self.head(x)
        if image is not None:
            out = out.add(self.conv(image).mean())
        return out


def inputs(device: Device) -> tuple[Tensor, Tensor]:
    device.seed(3)
    x = Tensor.random([6, 64], Distribution.uniform(-1.0, 1.0), device=device)
    image = Tensor.random([2, 2, 5, 5], Distribution.uniform(-1.0, 1.0), device=device)
    return x, image


SCHEMES = [
    QuantScheme.int8(),
    QuantScheme.int4(),
    QuantScheme.int8(activations="dynamic"),
    QuantScheme.int8(symmetric=False),
]


def test_default_group_takes_linear_and_conv_but_not_the_embedding_or_the_head():
    q = Net.new(Device.flex()).quantize(QuantScheme.int8())
    assert [type(b) for b in q.blocks] == [QuantizedLinear, QuantizedLinear]
    assert isinstance(q.conv, QuantizedConv2d)
    assert type(q.head) is Linear and type(q.embed) is Embedding
    assert set(schemes_of(q)) == {"conv", "blocks.0", "blocks.1"}


def test_a_param_group_selects_layers():
    model = Net.new(Device.flex())
    q = model.quantize(QuantScheme.int4(), ParamGroup.prefix("blocks.1.") | ParamGroup.paths(["head.weight"]))
    assert type(q.blocks[0]) is Linear and type(q.blocks[1]) is QuantizedLinear and type(q.head) is QuantizedLinear
    assert type(model.blocks[1]) is Linear  # the original is unchanged


@pytest.mark.parametrize("scheme", SCHEMES, ids=repr)
def test_forward_matches_the_dequantized_float_model(scheme):
    device = Device.flex()
    model = Net.new(device)
    q = model.quantize(scheme)
    x, image = inputs(device)
    # the oracle: the float model with each weight replaced by its dequantized value,
    # and (dynamic) the activations rounded to the int8 grid, in float64
    h = x.to_numpy().astype(np.float64)
    for block in q.blocks:
        w = block.weight.dequantize().to_numpy().astype(np.float64)
        if scheme.activations:
            s = np.maximum(np.abs(h).max(axis=1, keepdims=True) / 127, 1e-30)
            h = np.clip(np.rint(h / s), -127, 127) * s
        h = np.maximum(h @ w.T + block.bias.val().to_numpy(), 0)
    expected = h @ model.head.weight.val().to_numpy() + model.head.bias.val().to_numpy()
    np.testing.assert_allclose(q(x).to_numpy(), expected, rtol=1e-4, atol=1e-4)
    assert np.abs(q(x).to_numpy() - model(x).to_numpy()).max() < (0.2 if scheme.value == "int4" else 0.05)


@pytest.mark.parametrize("scheme", SCHEMES[:3], ids=repr)
def test_every_device_computes_what_flex_computes(device, scheme):
    q = Net.new(Device.flex()).quantize(scheme)
    x, image = inputs(Device.flex())
    expected = q(x, image).to_numpy()
    moved = q.to_device(device)
    got = moved(x.to_device(device), image.to_device(device)).to_numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    if device.inner() is not device:
        valid = moved.valid()
        assert valid.blocks[0].values.device == device.inner()
        np.testing.assert_allclose(valid(x.to_device(device.inner())).to_numpy(), q(x).to_numpy(), rtol=1e-4, atol=1e-4)


def test_gradients_flow_through_a_quantized_layer_to_the_input():
    device = Device.flex().autodiff()
    q = Net.new(device).quantize(QuantScheme.int8())
    x, _ = inputs(device)
    x = x.require_grad()
    grads = q(x).sum().backward()
    g = x.grad(grads).to_numpy()
    # the oracle: finite differences of the same function on flex, in float64
    w = [b.weight.dequantize().to_numpy().astype(np.float64) for b in q.blocks]
    head = q.head.weight.val().to_numpy().astype(np.float64)
    h = x.to_numpy().astype(np.float64)
    pre0 = h @ w[0].T + q.blocks[0].bias.val().to_numpy()
    mask0 = pre0 > 0
    pre1 = np.maximum(pre0, 0) @ w[1].T + q.blocks[1].bias.val().to_numpy()
    mask1 = pre1 > 0
    expected = ((np.ones((6, 5)) @ head.T) * mask1) @ w[1] * mask0 @ w[0]
    np.testing.assert_allclose(g, expected, rtol=1e-4, atol=1e-5)
    assert all(not p.require_grad for _, p in q.blocks[0].named_params())


@pytest.mark.parametrize("scheme", SCHEMES, ids=repr)
def test_records_keep_packed_values_and_the_scheme(tmp_path, scheme):
    device = Device.flex()
    q = Net.new(device).quantize(scheme)
    path = tmp_path / "q.safetensors"
    q.save_file(path)
    tensors, metadata = read_safetensors(path)
    meta = json.loads(metadata["quantization"])
    assert QuantScheme.from_json(json.dumps(meta["blocks.0"])) == scheme
    packed = (64, 32) if scheme.value == "int4" else (64, 64)
    assert tensors["blocks.0.values"].shape == packed
    assert tensors["blocks.0.values"].dtype == (np.int8 if scheme.symmetric and scheme.value == "int8" else np.uint8)
    x, image = inputs(device)
    # into the quantized model, and into a fresh float model (the record converts it)
    for template in (Net.new(device).quantize(scheme), Net.new(device)):
        loaded = template.load_file(path)
        assert schemes_of(loaded) == schemes_of(q)
        np.testing.assert_array_equal(loaded(x, image).to_numpy(), q(x, image).to_numpy())
        assert loaded.blocks[0].values.id == q.blocks[0].values.id


def test_quantized_models_are_smaller():
    device = Device.flex()
    model = Net.new(device)
    big = LinearConfig(512, 512).init(device)
    floats = big.weight.val().to_numpy().nbytes
    for scheme, bound in ((QuantScheme.int8(), 0.27), (QuantScheme.int4(), 0.16)):
        layer = big.quantize(scheme, ParamGroup.all())
        assert layer.weight.nbytes() <= bound * floats
    assert model.quantize(QuantScheme.int4()).blocks[0].weight.nbytes() < 64 * 64


def test_static_calibration_sets_each_layer_scale():
    device = Device.flex()
    model = Net.new(device)
    x, image = inputs(device)
    batches = [(x.mul_scalar(s), image) for s in (1.0, 2.0, 0.5)]  # a tuple is passed as model(*batch)
    q = model.quantize(QuantScheme.int8(activations="static"), calibration=batches)
    largest = 2.0 * float(np.abs(x.to_numpy()).max())
    assert q.blocks[0].input_scale.val().to_numpy()[0] == pytest.approx(largest / 127, rel=1e-6)
    second = max(float(np.abs(model.act(model.blocks[0](b)).to_numpy()).max()) for b, _ in batches)
    assert q.blocks[1].input_scale.val().to_numpy()[0] == pytest.approx(second / 127, rel=1e-5)
    assert q.conv.input_scale.val().to_numpy()[0] == pytest.approx(np.abs(image.to_numpy()).max() / 127, rel=1e-6)
    np.testing.assert_allclose(q(x, image).to_numpy(), model(x, image).to_numpy(), atol=0.05)


def test_quantize_errors_name_the_fix():
    model = Net.new(Device.flex())
    with pytest.raises(ConfigError, match="expected a QuantScheme"):
        model.quantize("int8")
    with pytest.raises(ConfigError, match="needs calibration="):
        model.quantize(QuantScheme.int8(activations="static"))
    with pytest.raises(ConfigError, match="has none"):
        model.quantize(QuantScheme.int8(), calibration=[inputs(Device.flex())[0]])
    with pytest.raises(ConfigError, match="gave no batches"):
        model.quantize(QuantScheme.int8(activations="static"), calibration=[])
    from ember.errors import ShapeError

    with pytest.raises(
        ShapeError, match="layer 'conv': ember: quantize: block size 64 does not divide the last dimension \\(32\\)"
    ):
        model.quantize(QuantScheme.int4(block=64), ParamGroup.all())
    with pytest.warns(UserWarning, match=r"does not fit the layers \['conv'\]"):
        q = model.quantize(QuantScheme.int4(block=64))
    assert type(q.conv) is Conv2d and type(q.blocks[0]) is QuantizedLinear
