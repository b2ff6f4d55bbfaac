"""Lazy parameters initialise from the key they took at creation: independent of the
order of first use, of seeds set later, of the device they are moved to, and of
lazy versus immediate initialisation (issue 13, item 4)."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Distribution, Module, Tensor
from ember.module import Param, ParamId
from ember.nn import (
    Constant,
    Conv2dConfig,
    EmbeddingConfig,
    KaimingNormal,
    KaimingUniform,
    LinearConfig,
    Normal,
    Orthogonal,
    Uniform,
    XavierNormal,
    XavierUniform,
)
from tests.conftest import _gpu_device
from tests.shared_models import Mlp


def values(model: Module) -> dict[str, bytes]:
    return {path: p.val().to_numpy().tobytes() for path, p in model.named_params()}


def _built(device: Device, seed: int = 42) -> tuple[Mlp, Mlp]:
    device.seed(seed)
    return Mlp.new(device), Mlp.new(device)


def test_reading_b_before_a_leaves_a_unchanged():
    flex = Device.flex().autodiff()
    a, b = _built(flex)
    in_order = (values(a), values(b))
    a, b = _built(flex)
    vb = values(b)
    assert (values(a), vb) == in_order
    # Parameter by parameter, in any order.
    a, _ = _built(flex)
    params = [p for _, p in a.named_params()]
    got = {id(p): p.val().to_numpy().tobytes() for p in reversed(params)}
    assert [got[id(p)] for p in params] == list(in_order[0].values())


def test_seed_after_build_does_not_change_the_model():
    flex = Device.flex()
    a, _ = _built(flex)
    want = values(a)
    a, _ = _built(flex)
    flex.seed(7)
    Tensor.random([1000], device=flex)  # draws between creation and first use
    assert values(a) == want


def test_lazy_and_immediate_initialisation_agree():
    flex = Device.flex()
    flex.seed(3)
    layer = LinearConfig(5, 4).init(flex)
    eager = values(layer)  # read at once
    Tensor.random([10], device=flex)
    later = LinearConfig(5, 4).init(flex)  # created after more draws: another key
    flex.seed(3)
    lazy = LinearConfig(5, 4).init(flex)
    Tensor.random([123], Distribution.normal(0.0, 1.0), device=flex)
    assert values(lazy) == eager != values(later)


def test_parameters_take_distinct_keys_and_one_block_each():
    flex = Device.flex()
    flex.seed(0)
    layer = LinearConfig(3, 3).init(flex)
    assert flex.rng_state()["offset"] == 2  # a key each for weight and bias: nothing drawn yet
    assert layer.weight.init_key != layer.bias.init_key
    assert not layer.weight.is_initialized()
    assert Param.from_tensor(Tensor.zeros([2])).init_key is None


def test_to_device_valid_and_fork_move_the_same_values():
    gpu = _gpu_device()
    flex = Device.flex()
    want = values(_built(flex.autodiff())[0])
    model, _ = _built(flex.autodiff())
    there = model.to_device(gpu)  # still lazy: initialised on the GPU
    assert not there.l1.weight.is_initialized()
    back = there.to_device(flex)
    assert values(there) == want and values(back) == want
    model, _ = _built(flex.autodiff())
    assert values(model.valid()) == want and values(model.fork(gpu.autodiff())) == want


def test_flex_and_cube_initialise_the_design_mlp_identically():
    gpu = _gpu_device()
    for seed in (42, 0, 2**63 + 11):
        flex_model, _ = _built(Device.flex().autodiff(), seed)
        cube_model, _ = _built(gpu.autodiff(), seed)
        assert values(flex_model) == values(cube_model)
    Device.flex().seed(42)
    gpu.seed(42)
    x_flex = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=Device.flex())
    x_cube = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=gpu)
    assert x_flex.to_numpy().tobytes() == x_cube.to_numpy().tobytes()


INITIALIZERS = [
    Uniform(-0.3, 0.7),
    Normal(0.5, 2.0),
    KaimingUniform(),
    KaimingNormal(gain=2.0, fan_out_only=True),
    XavierUniform(),
    XavierNormal(gain=0.5),
    Orthogonal(gain=1.5),
    Constant(0.25),
]


@pytest.mark.parametrize("init", INITIALIZERS, ids=lambda i: type(i).__name__)
def test_every_initializer_draws_through_the_key(init):
    flex = Device.flex()
    flex.seed(11)
    first = init.lazy((6, 5), fan_in=6, fan_out=5, device=flex)
    flex.seed(11)
    second = init.lazy((6, 5), fan_in=6, fan_out=5, device=flex)
    Tensor.random([77], device=flex)
    a = second.val().to_numpy()  # read second first, after unrelated draws
    b = first.val().to_numpy()
    assert a.tobytes() == b.tobytes()
    # The same as drawing eagerly inside a fork at the key.
    with flex.fork_rng(first.init_key):
        c = init.init_with((6, 5), 6, 5, flex).to_numpy()
    assert c.tobytes() == a.tobytes()
    if not isinstance(init, Constant):
        flex.seed(12)
        assert init.lazy((6, 5), fan_in=6, fan_out=5, device=flex).val().to_numpy().tobytes() != a.tobytes()


@pytest.mark.parametrize("init", [KaimingUniform(), XavierNormal(), Orthogonal()], ids=lambda i: type(i).__name__)
def test_initializers_give_the_same_values_on_cube(init):
    gpu = _gpu_device()
    flex = Device.flex()
    flex.seed(5)
    param = init.lazy((8, 3), fan_in=8, fan_out=3, device=flex)
    on_gpu = param.to_device(gpu).val().to_numpy()
    np.testing.assert_array_equal(on_gpu, param.val().to_numpy())


def test_layers_beyond_linear_are_order_independent():
    flex = Device.flex()
    runs = []
    for reverse in (False, True):
        flex.seed(21)
        conv = Conv2dConfig((2, 3), (3, 3)).init(flex)
        emb = EmbeddingConfig(10, 4).init(flex)
        models = [emb, conv] if reverse else [conv, emb]
        got = {type(m).__name__: values(m) for m in models}
        runs.append(got)
    assert runs[0] == runs[1]


def test_an_explicit_key_and_a_bad_device():
    flex = Device.flex()
    init = Normal(0.0, 1.0)

    def make(device: Device, _require_grad: bool) -> Tensor:
        return init.init_with((4,), None, None, device)

    p = Param.uninitialized(ParamId(), make, flex, True, (4,), key=123)
    flex.seed(123)
    assert p.init_key == 123 and p.val().to_numpy().tobytes() == init.init([4], flex).to_numpy().tobytes()
    from ember.errors import ModuleError

    with pytest.raises(ModuleError, match="Device"):
        Param.uninitialized(ParamId(), make, "flex", True, (4,))
