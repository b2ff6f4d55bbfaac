"""``ember.nn.lora``: low-rank adapters against a PyTorch reference written out by hand
(frozen ``torch.nn.Linear`` layers plus PEFT-layout ``lora_A [r, in]``/``lora_B [out, r]``
tensors), merging, adapter files, selectors and their errors, ``ember.compile`` and the
Learner."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ember
from ember import Device, Module, Param, Tensor
from ember.errors import ConfigError, ModuleError, RecordError
from ember.module import ParamGroup
from ember.module.record import read_safetensors
from ember.nn import LayerNorm, LayerNormConfig, Linear, LinearConfig, Relu, lora
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams
from ember.tensor.layer_ops import dropout as dropout_fn
from tests.conftest import parity_device

AD = parity_device()
ADAPTED = ("q_proj", "v_proj")


class Net(Module):
    """Two adapted layers (``q_proj``, ``v_proj``), a frozen head and a norm."""

    norm: LayerNorm
    q_proj: Linear
    act: Relu
    v_proj: Linear
    head: Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.v_proj(self.act(self.q_proj(self.norm(x)))))


class Stack(Module):
    blocks: list[Net]

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def net(device: Device, d: int = 6, hidden: int = 8) -> Net:
    return Net(
        LayerNormConfig(d).init(device),
        LinearConfig(d, hidden).init(device),
        Relu(),
        LinearConfig(hidden, d).init(device),
        LinearConfig(d, 3).init(device),
    )


def linear64(rng: np.random.Generator, d_in: int, d_out: int, device: Device) -> Linear:
    return Linear(
        weight=Param.from_tensor(Tensor.from_data(rng.normal(0.0, 0.5, (d_in, d_out)), device=device)),
        bias=Param.from_tensor(Tensor.from_data(rng.normal(0.0, 0.1, (d_out,)), device=device)),
    )


class ProjMlp(Module):
    q_proj: Linear
    act: Relu
    v_proj: Linear
    head: Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.v_proj(self.act(self.q_proj(x))))


def mlp64(rng: np.random.Generator, device: Device = AD) -> ProjMlp:
    """A float64 MLP 5-7-6-3 with PyTorch-like weights."""
    return ProjMlp(linear64(rng, 5, 7, device), Relu(), linear64(rng, 7, 6, device), linear64(rng, 6, 3, device))


def values(model: Module) -> dict[str, np.ndarray]:
    return {path: p.val().to_numpy() for path, p in model.named_params()}


def with_adapters(model: Module, rng: np.random.Generator, scale: float = 0.3) -> Module:
    """``model`` with random (non-zero) adapter values, ids and flags kept, so that both
    ``lora_a`` and ``lora_b`` get non-zero gradients from the first step."""
    chosen = {path for path, _ in lora.adapter_params(model)}

    def fill(p: Param, path: str) -> Param:
        if path not in chosen:
            return p
        value = rng.normal(0.0, scale, tuple(p.shape)).astype(p.val().to_numpy().dtype)
        return Param(p.id, Tensor.from_data(value, device=p.device), p.require_grad)

    return model.map_params(fill)


# ---------------------------------------------------------------------- structure
def test_init_adapts_selected_layers_and_freezes_the_rest(rng):
    device = Device.flex().autodiff()
    base = net(device)
    model = lora.LoraConfig(r=4, alpha=8.0, targets=list(ADAPTED)).init(base)
    assert type(model) is Net and isinstance(model.q_proj, lora.LoraLinear) and isinstance(model.head, Linear)
    layer = model.q_proj
    assert (layer.r, layer.scale, layer.d_input, layer.d_output) == (4, 2.0, 6, 8)
    assert layer.lora_a.lazy_shape() == [6, 4] and layer.lora_b.lazy_shape() == [4, 8]
    trainable = [path for path, p in model.named_params() if p.require_grad]
    assert trainable == ["q_proj.lora_a", "q_proj.lora_b", "v_proj.lora_a", "v_proj.lora_b"]
    assert [path for path, _ in lora.adapter_params(model)] == trainable
    group = lora.adapter_group(model)
    assert [path for path, p in model.named_params() if group.matches(p.id, path)] == trainable
    # The base's parameters keep their ids; the base model itself is untouched.
    ids = dict((path, p.id) for path, p in base.named_params())
    assert {path.replace(".base", ""): p.id for path, p in model.named_params() if "lora_" not in path} == ids
    assert all(p.require_grad for p in base.params())
    # lora_a as PEFT's kaiming_uniform_(a=sqrt(5)): uniform on +-1/sqrt(d_in); lora_b zeros, so the
    # outputs are those of the base model.
    a = model.v_proj.lora_a.val().to_numpy()
    assert np.abs(a).max() <= 1 / np.sqrt(8) and np.abs(a).max() > 0.5 / np.sqrt(8)
    assert not model.v_proj.lora_b.val().to_numpy().any()
    x = Tensor.from_data(rng.normal(size=(5, 6)).astype(np.float32), device=device)
    np.testing.assert_array_equal(model(x).to_numpy(), base(x).to_numpy())


def test_selectors_regex_names_group_and_default():
    device = Device.flex()
    stack = Stack([net(device), net(device)])
    every = lora.LoraConfig().select(stack)
    assert every == [f"blocks.{i}.{name}" for i in (0, 1) for name in ("q_proj", "v_proj", "head")]
    assert lora.LoraConfig(targets=r"blocks\.1\.(q|v)_proj$").select(stack) == ["blocks.1.q_proj", "blocks.1.v_proj"]
    assert lora.LoraConfig(targets=["v_proj"]).select(stack) == ["blocks.0.v_proj", "blocks.1.v_proj"]
    assert lora.LoraConfig(targets=("0.head",)).select(stack) == ["blocks.0.head"]
    # A name matches a path's last parts, not a substring of them.
    with pytest.raises(ConfigError, match=r"the names \['proj'\] selects no layer of Stack; its Linear layers are"):
        lora.LoraConfig(targets=["proj"]).init(stack)
    group = ParamGroup.prefix("blocks.0.") & ParamGroup.contains("proj")
    assert lora.LoraConfig(targets=group).select(stack) == ["blocks.0.q_proj", "blocks.0.v_proj"]
    head_id = stack.blocks[1].head.weight.id
    assert lora.LoraConfig(targets=ParamGroup.ids([head_id])).select(stack) == ["blocks.1.head"]
    # A lone Linear is adapted as the root by default.
    assert isinstance(lora.LoraConfig().init(LinearConfig(3, 4).init(device)), lora.LoraLinear)
    # Nested paths travel through lists.
    model = lora.LoraConfig(r=2, targets=r"\.head$").init(stack)
    assert [path for path, _ in lora.lora_layers(model)] == ["blocks.0.head", "blocks.1.head"]
    assert isinstance(model.blocks[0].q_proj, Linear) and not model.blocks[0].q_proj.weight.require_grad


def test_selector_errors_name_the_paths():
    device = Device.flex()
    stack = Stack([net(device)])
    with pytest.raises(ConfigError, match=r"not Linear layers: 'blocks\.0' \(Net\).*anchor a regex"):
        lora.LoraConfig(targets=r"blocks\.0").init(stack)
    with pytest.raises(ConfigError, match=r"'blocks\.0\.norm' \(LayerNorm\)"):
        lora.LoraConfig(targets=["norm", "q_proj"]).init(stack)
    with pytest.raises(ConfigError, match=r"the regex 'k_proj' selects no layer of Stack; its Linear layers are "):
        lora.LoraConfig(targets="k_proj").init(stack)
    with pytest.raises(ConfigError, match="selects no layer of Relu; its Linear layers are none"):
        lora.LoraConfig().init(Relu())
    model = lora.LoraConfig(targets=["q_proj"]).init(stack)
    with pytest.raises(ModuleError, match=r"already has LoRA adapters \('blocks\.0\.q_proj'\).*lora\.merge"):
        lora.LoraConfig(targets=["v_proj"]).init(model)
    with pytest.raises(ModuleError, match="no LoRA layers to merge"):
        lora.merge(stack)


def test_config_validation_and_json():
    for kwargs, message in [
        ({"r": 0}, "r \\(the rank\\) must be >= 1"),
        ({"alpha": 0.0}, "alpha must be a finite number > 0"),
        ({"dropout": 1.0}, "dropout must lie in \\[0, 1\\)"),
        ({"targets": "q_proj("}, "not a valid regex"),
        ({"targets": []}, "one or more non-empty layer names"),
        ({"targets": ["q_proj", ""]}, "one or more non-empty layer names"),
        ({"targets": 3}, "targets must be"),
    ]:
        with pytest.raises(ConfigError, match=message):
            lora.LoraConfig(**kwargs)
    config = lora.LoraConfig(r=4, alpha=32.0, dropout=0.1, targets=["q_proj", "v_proj"])
    assert lora.LoraConfig.from_json(config.to_json()) == config
    with pytest.raises(ConfigError, match="is a ParamGroup, which has no JSON form"):
        lora.LoraConfig(targets=ParamGroup.contains("q")).to_json()


# ---------------------------------------------------------------------- against torch
def torch_twin(torch, model: ProjMlp):
    """The LoRA model in PyTorch: frozen ``nn.Linear``s (ember's weights transposed) and
    adapters in PEFT's layout (``lora_A = lora_a.T``, ``lora_B = lora_b.T``)."""
    layers, adapters = {}, {}
    for name in ("q_proj", "v_proj", "head"):
        layer = getattr(model, name)
        base = layer.base if isinstance(layer, lora.LoraLinear) else layer
        twin = torch.nn.Linear(base.d_input, base.d_output, dtype=torch.float64)
        with torch.no_grad():
            twin.weight.copy_(torch.from_numpy(base.weight.val().to_numpy().T.copy()))
            twin.bias.copy_(torch.from_numpy(base.bias.val().to_numpy()))
        twin.requires_grad_(False)
        layers[name] = twin
        if isinstance(layer, lora.LoraLinear):
            a = torch.from_numpy(layer.lora_a.val().to_numpy().T.copy()).requires_grad_()
            b = torch.from_numpy(layer.lora_b.val().to_numpy().T.copy()).requires_grad_()
            adapters[name] = (a, b, layer.scale)

    def forward(x):
        def apply(name, h):
            out = layers[name](h)
            if name in adapters:
                a, b, scale = adapters[name]
                out = out + (h @ a.T @ b.T) * scale
            return out

        return apply("head", apply("v_proj", torch.relu(apply("q_proj", x))))

    return forward, adapters, layers


@pytest.mark.torch
def test_forward_and_adapter_gradients_match_torch(torch, rng):
    model = with_adapters(lora.LoraConfig(r=3, alpha=6.0, targets=list(ADAPTED)).init(mlp64(rng)), rng)
    forward, adapters, layers = torch_twin(torch, model)
    x = rng.uniform(-1.0, 1.0, (9, 5))
    out = model(Tensor.from_data(x, device=AD))
    ref = forward(torch.from_numpy(x))
    np.testing.assert_allclose(out.to_numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    w = rng.uniform(0.5, 1.5, (9, 3))
    grads = out.mul(Tensor.from_data(w, device=AD)).sum().backward()
    (ref * torch.from_numpy(w)).sum().backward()
    for name in ADAPTED:
        layer = getattr(model, name)
        a, b, _ = adapters[name]
        np.testing.assert_allclose(layer.lora_a.val().grad(grads).to_numpy(), a.grad.numpy().T, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(layer.lora_b.val().grad(grads).to_numpy(), b.grad.numpy().T, rtol=1e-10, atol=1e-12)
        assert layer.base.weight.val().grad(grads) is None and layers[name].weight.grad is None
    gp = GradientsParams.from_grads(grads, model)
    assert sorted(gp.ids()) == sorted(p.id for _, p in lora.adapter_params(model))


def mse_step(optim, model: Module, x: Tensor, y: Tensor, lr: float):
    loss = MseLoss().forward(model(x), y, Reduction.MEAN)
    return optim.step(lr, model, GradientsParams.from_grads(loss.backward(), model)), loss


@pytest.mark.torch
def test_adam_steps_match_torch_and_only_adapters_move(torch, rng):
    model = with_adapters(lora.LoraConfig(r=2, alpha=4.0, targets=list(ADAPTED)).init(mlp64(rng)), rng)
    forward, adapters, _ = torch_twin(torch, model)
    before = values(model)
    x, y = rng.uniform(-1.0, 1.0, (16, 5)), rng.normal(size=(16, 3))
    tx, ty = Tensor.from_data(x, device=AD), Tensor.from_data(y, device=AD)
    optim = AdamConfig(epsilon=1e-8).init()
    reference = torch.optim.Adam([t for a, b, _ in adapters.values() for t in (a, b)], lr=1e-2, eps=1e-8)
    for _ in range(5):
        model, _ = mse_step(optim, model, tx, ty, 1e-2)
        reference.zero_grad()
        torch.nn.functional.mse_loss(forward(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        reference.step()
    after = values(model)
    for name in ADAPTED:
        a, b, _ = adapters[name]
        np.testing.assert_allclose(after[f"{name}.lora_a"], a.detach().numpy().T, rtol=1e-5)
        np.testing.assert_allclose(after[f"{name}.lora_b"], b.detach().numpy().T, rtol=1e-5)
    for path, value in before.items():
        if "lora_" in path:
            assert not np.array_equal(after[path], value), path
        else:
            assert after[path].tobytes() == value.tobytes(), path  # the frozen base: bit-identical


# ---------------------------------------------------------------------- merge, dropout
def test_merge_equals_the_unmerged_forward_and_restores_the_structure(tmp_path, rng):
    device = Device.flex().autodiff()
    base = net(device)
    model = with_adapters(lora.LoraConfig(r=3, alpha=5.0).init(base), rng)
    merged = lora.merge(model)
    assert type(merged) is Net and all(type(m) is Linear for m in (merged.q_proj, merged.v_proj, merged.head))
    shapes = [(path, p.id, list(p.shape)) for path, p in merged.named_params()]
    assert shapes == [(path, p.id, list(p.shape)) for path, p in base.named_params()]
    x = Tensor.from_data(rng.normal(size=(4, 6)).astype(np.float32), device=device)
    np.testing.assert_allclose(merged(x).to_numpy(), model(x).to_numpy(), rtol=1e-5, atol=1e-6)
    q = model.q_proj
    expected = q.base.weight.val().to_numpy() + q.scale * q.lora_a.val().to_numpy() @ q.lora_b.val().to_numpy()
    np.testing.assert_allclose(merged.q_proj.weight.val().to_numpy(), expected, rtol=1e-6, atol=1e-7)
    # Saved and loaded as the original model is.
    merged.save_file(tmp_path / "merged.safetensors")
    loaded = net(device).load_file(tmp_path / "merged.safetensors")
    np.testing.assert_allclose(loaded(x).to_numpy(), model(x).to_numpy(), rtol=1e-5, atol=1e-6)


def test_dropout_acts_on_the_adapter_input_only(rng):
    device = Device.flex().autodiff()
    layer = with_adapters(lora.LoraConfig(r=2, alpha=2.0, dropout=0.5).init(LinearConfig(6, 4).init(device)), rng)
    x = Tensor.from_data(rng.normal(size=(8, 6)).astype(np.float32), device=device)
    device.seed(5)
    out = layer(x).to_numpy()
    device.seed(5)
    dropped = dropout_fn(x, 0.5).to_numpy()
    a, b = layer.lora_a.val().to_numpy(), layer.lora_b.val().to_numpy()
    expected = layer.base(x).to_numpy() + dropped @ a @ b * layer.scale
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert (dropped == 0).any()
    evaluated = layer.valid()(x.to_device(device.inner())).to_numpy()  # no dropout off the autodiff device
    np.testing.assert_allclose(evaluated, layer.base(x).to_numpy() + x.to_numpy() @ a @ b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- adapter files
def test_save_and_load_adapters_round_trip(tmp_path, rng):
    device = Device.flex().autodiff()
    base = net(device)
    config = lora.LoraConfig(r=3, alpha=6.0, targets=list(ADAPTED))
    model = with_adapters(config.init(base), rng)
    path = tmp_path / "adapters.safetensors"
    lora.save_adapters(model, path, metadata={"task": "demo"})
    tensors, metadata = read_safetensors(path)
    assert sorted(tensors) == ["q_proj.lora_a", "q_proj.lora_b", "v_proj.lora_a", "v_proj.lora_b"]
    assert json.loads(metadata["config"]) == json.loads(json.dumps(config.to_dict()))
    assert json.loads(metadata["layers"]) == {"q_proj": {"r": 3, "alpha": 6.0}, "v_proj": {"r": 3, "alpha": 6.0}}
    assert metadata["user.task"] == "demo"
    fresh = config.init(base)
    loaded = lora.load_adapters(fresh, path)
    assert values(loaded).keys() == values(model).keys()
    for (p_path, p), (_, q) in zip(loaded.named_params(), model.named_params()):
        np.testing.assert_array_equal(p.val().to_numpy(), q.val().to_numpy())
        assert p.id == q.id and p.require_grad == q.require_grad, p_path  # ids as saved, flags as the model's
    x = Tensor.from_data(rng.normal(size=(3, 6)).astype(np.float32), device=device)
    np.testing.assert_array_equal(loaded(x).to_numpy(), model(x).to_numpy())
    # ParamGroup targets have no JSON form: the file still saves, without the config.
    grouped = lora.LoraConfig(r=3, alpha=6.0, targets=ParamGroup.contains("proj")).init(base)
    lora.save_adapters(grouped, tmp_path / "grouped.safetensors")
    assert "config" not in read_safetensors(tmp_path / "grouped.safetensors")[1]
    assert lora.load_adapters(fresh, tmp_path / "grouped.safetensors").q_proj.lora_a.id == grouped.q_proj.lora_a.id


def test_load_adapters_mismatches_are_record_errors(tmp_path, rng):
    device = Device.flex()
    base = net(device)
    path = tmp_path / "adapters.safetensors"
    lora.save_adapters(lora.LoraConfig(r=3, alpha=6.0, targets=list(ADAPTED)).init(base), path)
    with pytest.raises(RecordError, match=r"'q_proj\.lora_a' has shape \[6, 3\] in the record but \[6, 2\]"):
        lora.load_adapters(lora.LoraConfig(r=2, alpha=6.0, targets=list(ADAPTED)).init(base), path)
    with pytest.raises(RecordError, match=r"alpha differs .* for q_proj \(file: 6\.0, model: 8\.0\), v_proj"):
        lora.load_adapters(lora.LoraConfig(r=3, alpha=8.0, targets=list(ADAPTED)).init(base), path)
    other = lora.LoraConfig(r=3, alpha=6.0, targets=["q_proj", "head"]).init(base)
    with pytest.raises(
        RecordError, match=r"missing from the file: head\.lora_a, head\.lora_b; unexpected in the file: v_proj\.lora_a"
    ):
        lora.load_adapters(other, path)
    partial = lora.load_adapters(other, path, strict=False)  # q_proj's adapters only
    assert partial.q_proj.lora_a.val().to_numpy().tobytes() == read_safetensors(path)[0]["q_proj.lora_a"].tobytes()
    assert partial.head.lora_a.id == other.head.lora_a.id
    with pytest.raises(ModuleError, match=r"has no LoRA adapters; apply the LoraConfig .*\"r\": 3"):
        lora.load_adapters(base, path)
    base.save_file(tmp_path / "model.safetensors")
    with pytest.raises(RecordError, match="holds a 'module' record, expected a 'lora-adapters' record"):
        lora.load_adapters(other, tmp_path / "model.safetensors")
    with pytest.raises(ModuleError, match="has no LoRA adapters"):
        lora.save_adapters(base, tmp_path / "none.safetensors")


# ---------------------------------------------------------------------- compile, Learner
def test_compiled_steps_equal_eager_steps():
    def run(compiled: bool):
        device = Device.flex().autodiff()
        device.seed(3)
        model = lora.LoraConfig(r=4, alpha=8.0, dropout=0.2).init(net(device))
        model = with_adapters(model, np.random.default_rng(7))
        base = {path: v for path, v in values(model).items() if "lora_" not in path}
        data = np.random.default_rng(8)
        x = Tensor.from_data(data.normal(size=(16, 6)).astype(np.float32), device=device)
        y = Tensor.from_data(data.normal(size=(16, 3)).astype(np.float32), device=device)
        optim = AdamConfig().init()

        def step(model, x, y, lr):
            return mse_step(optim, model, x, y, lr)

        fn = ember.compile(step) if compiled else step
        losses = []
        for _ in range(6):
            model, loss = fn(model, x, y, 1e-2)
            losses.append(loss.into_scalar())
        frozen = {path: v for path, v in values(model).items() if "lora_" not in path}
        assert all(frozen[k].tobytes() == base[k].tobytes() for k in base)
        return np.array(losses), values(model), fn

    compiled, compiled_values, fn = run(True)
    eager, eager_values, _ = run(False)
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    assert eager[-1] < eager[0]
    for path, value in eager_values.items():
        np.testing.assert_allclose(compiled_values[path], value, rtol=1e-5, atol=1e-7)
    assert fn.stats["eager"] == 0


def test_learner_fits_only_the_adapters():
    from ember.train import Learner, LossMetric, SupervisedTraining
    from tests.train.models import Classifier, loaders

    device = Device.flex().autodiff()
    device.seed(0)
    model = lora.LoraConfig(r=2, alpha=4.0, targets=["l1", "l2"]).init(Classifier.new(device))
    before = values(model)
    train, valid = loaders()
    training = SupervisedTraining(None).renderer("none").metric_train_numeric(LossMetric()).num_epochs(4)
    result = training.launch(Learner(model, AdamConfig().init(), 5e-2), train, valid)
    losses = [v for _, v in result.history.series("Loss", "train")]
    assert losses[-1] < losses[0]
    after = values(result.model)
    for path, value in before.items():
        assert (after[path].tobytes() == value.tobytes()) == ("lora_" not in path), path
    assert isinstance(result.model.l1, lora.LoraLinear)
