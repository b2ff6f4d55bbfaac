"""Modules: declaration, traversal, map, ids, lazy init, freeze and devices."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from ember import Device, Module, Param, ParamId, Tensor
from ember.errors import ModuleError
from ember.module import ModuleMapper, ModuleVisitor, ParamGroup, RunningState
from ember.nn import Linear, LinearConfig, Relu
from tests.shared_models import Mlp


class Stack(Module):
    layers: list
    named: dict
    scale: float = 2.0
    stats: RunningState | None = None

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x.mul_scalar(self.scale)


@pytest.fixture
def ad():
    return Device.flex().autodiff()


def test_seed_mlp_shape(ad):
    model = Mlp.new(ad)
    assert model.num_params() == 97
    assert [path for path, _ in model.named_params()] == ["l1.weight", "l1.bias", "l2.weight", "l2.bias"]
    assert [p.lazy_shape() for p in model.params()] == [[4, 16], [16], [16, 1], [1]]
    assert model.devices() == [ad]


def test_generated_init_positional_keyword_and_errors(ad):
    l1, l2 = LinearConfig(4, 16).init(ad), LinearConfig(16, 1).init(ad)
    a = Mlp(l1, Relu(), l2)
    b = Mlp(l1=l1, act=Relu(), l2=l2)
    assert a.l1 is b.l1
    with pytest.raises(ModuleError, match="unknown field 'l3'"):
        Mlp(l1=l1, act=Relu(), l2=l2, l3=l2)
    with pytest.raises(ModuleError, match="missing the field 'l2'"):
        Mlp(l1=l1, act=Relu())
    with pytest.raises(ModuleError, match="takes 3 fields"):
        Mlp(l1, Relu(), l2, l2)
    with pytest.raises(ModuleError, match="twice"):
        Mlp(l1, act=Relu(), l2=l2, l1=l1)
    with pytest.raises(ModuleError, match="has no field 'extra'"):
        a.extra = 1


def test_forgotten_annotation_in_custom_init_is_reported():
    class Bad(Module):
        good: Linear

        def __init__(self):
            self.good = LinearConfig(1, 1).init(Device.flex())
            self.forgot = LinearConfig(1, 1).init(Device.flex())

    with pytest.raises(ModuleError, match="forgot"):
        Bad()

    class Unset(Module):
        a: Linear

        def __init__(self):
            pass

    with pytest.raises(ModuleError, match="did not set"):
        Unset()


def test_containers_constants_and_paths(flex):
    stack = Stack(
        layers=[LinearConfig(2, 3).init(flex), Relu(), LinearConfig(3, 2).init(flex)],
        named={"head": LinearConfig(2, 1).init(flex)},
        stats=RunningState(Tensor.zeros([2], device=flex)),
    )
    paths = [p for p, _ in stack.named_params()]
    assert paths == [
        "layers.0.weight",
        "layers.0.bias",
        "layers.2.weight",
        "layers.2.bias",
        "named.head.weight",
        "named.head.bias",
    ]
    assert [p for p, _ in stack.named_states()] == ["stats"]
    assert stack.num_params() == 6 + 3 + 6 + 2 + 2 + 1
    out = stack(Tensor.ones([1, 2], device=flex))
    assert out.dims() == [1, 2]
    assert "Stack" in repr(stack) and "scale: 2.0" in repr(stack)


def test_visitor_hooks_and_order(ad):
    model = Mlp.new(ad)
    events = []

    class Recorder(ModuleVisitor):
        def visit_float(self, param, path):
            events.append(("float", path))

        def enter_module(self, path, module):
            events.append(("enter", path, type(module).__name__))

        def exit_module(self, path, module):
            events.append(("exit", path))

    model.visit(Recorder())
    assert events[0] == ("enter", "", "Mlp")
    assert ("enter", "l1", "Linear") in events and ("exit", "act") in events
    assert [e[1] for e in events if e[0] == "float"] == ["l1.weight", "l1.bias", "l2.weight", "l2.bias"]


def test_map_keeps_ids_and_leaves_original(ad):
    model = Mlp.new(ad)
    ids = [p.id for p in model.params()]

    class Double(ModuleMapper):
        def map_float(self, param, path):
            return param.map(lambda t: t.mul_scalar(2.0))

    doubled = model.map(Double())
    assert [p.id for p in doubled.params()] == ids
    for old, new in zip(model.params(), doubled.params()):
        np.testing.assert_allclose(new.val().to_numpy(), 2 * old.val().to_numpy())
    assert doubled is not model and doubled.l1 is not model.l1
    assert all(p.val().is_require_grad() for p in doubled.params())


def test_param_ids_are_random_64_bit_and_serializable():
    ids = {ParamId().value for _ in range(100)}
    assert len(ids) == 100 and all(0 <= v < 2**64 for v in ids)
    pid = ParamId()
    assert ParamId.parse(pid.serialize()) == pid and hash(pid) == hash(ParamId(pid.value))


def test_lazy_init_allocates_nothing_until_used(ad):
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    layer = LinearConfig(512, 512).init(ad)
    assert layer.num_params() == 512 * 512 + 512
    assert layer.weight.lazy_shape() == [512, 512] and layer.weight.lazy_device() == ad
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert after - before < 64 * 1024, "a lazy layer allocated its weights"
    assert not layer.weight.is_initialized()
    value = layer.weight.val()
    assert layer.weight.is_initialized() and value.dims() == [512, 512] and value.is_require_grad()
    assert layer.weight.val() is value


def test_lazy_init_is_deterministic_with_seed(ad):
    ad.seed(3)
    a = LinearConfig(4, 3).init(ad).weight.val().to_numpy()
    ad.seed(3)
    b = LinearConfig(4, 3).init(ad).weight.val().to_numpy()
    assert a.tobytes() == b.tobytes()


def test_linear_default_init_bounds(flex):
    layer = LinearConfig(100, 50).init(flex)
    w, b = layer.weight.val().to_numpy(), layer.bias.val().to_numpy()
    bound = 1 / np.sqrt(100)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(b).max() <= bound


def test_param_from_tensor_and_require_grad(ad):
    p = Param.from_tensor(Tensor.ones([2], device=ad))
    assert p.require_grad and p.val().is_require_grad()
    frozen = p.set_require_grad(False)
    assert frozen.id == p.id and not frozen.val().is_require_grad()
    ints = Param.from_tensor(Tensor.from_ints([1], device=ad))
    assert not ints.require_grad


def test_no_grad_freeze_unfreeze(ad):
    model = Mlp.new(ad)
    assert not any(p.require_grad for p in model.no_grad().params())
    frozen = model.freeze(ParamGroup.prefix("l1."))
    assert [p.require_grad for p in frozen.params()] == [False, False, True, True]
    assert all(p.require_grad for p in frozen.unfreeze().params())
    only_bias = model.freeze(~ParamGroup.contains("bias"))
    assert [p.require_grad for p in only_bias.params()] == [False, True, False, True]
    by_regex = model.freeze(ParamGroup.regex(r"^l2\.w"))
    assert [p.require_grad for p in by_regex.params()] == [True, True, False, True]
    by_id = model.freeze(ParamGroup.ids([model.l1.weight.id]) | ParamGroup.paths(["l2.bias"]))
    assert [p.require_grad for p in by_id.params()] == [False, True, True, False]


def test_frozen_params_get_no_gradient(ad):
    model = Mlp.new(ad).freeze(ParamGroup.prefix("l1."))
    loss = model(Tensor.ones([2, 4], device=ad)).sum()
    grads = loss.backward()
    assert model.l1.weight.val().grad(grads) is None
    assert model.l2.weight.val().grad(grads) is not None


def test_valid_moves_to_inner_device_and_to_device(ad):
    model = Mlp.new(ad)
    valid = model.valid()
    assert valid.devices() == [Device.flex()]
    out = valid(Tensor.ones([1, 4], device=Device.flex()))
    assert not out.is_require_grad()
    back = valid.to_device(ad)
    assert back.devices() == [ad] and all(p.val().is_require_grad() for p in back.params())
    assert [p.id for p in back.params()] == [p.id for p in model.params()]
    forked = model.fork(ad)
    assert [p.id for p in forked.params()] == [p.id for p in model.params()]


def test_repr_prints_the_tree(ad):
    text = repr(Mlp.new(ad))
    assert text.startswith("Mlp {") and "l1: Linear {d_input: 4, d_output: 16" in text and "params: 97" in text


def test_clone_copies_running_states_and_shares_parameter_values(ad, rng):
    from ember.nn import BatchNormConfig

    norm = BatchNormConfig(3).init(ad)
    copy = norm.clone()
    assert copy.running_mean is not norm.running_mean and copy.running_mean.id == norm.running_mean.id
    assert copy.gamma.val() is norm.gamma.val() and copy.gamma.id == norm.gamma.id
    before = copy.running_mean.value().to_numpy()
    norm(Tensor.from_data(rng.normal(5.0, 1.0, (8, 3)).astype(np.float32), device=ad))  # training: updates statistics
    assert not np.allclose(norm.running_mean.value().to_numpy(), before)
    np.testing.assert_array_equal(copy.running_mean.value().to_numpy(), before)


def test_a_built_module_is_a_value_fields_cannot_be_assigned():
    """to_device and map share unchanged sub-modules; assigning through one would change
    the other, so assignment is refused with the way to build a changed copy."""
    from ember.errors import ModuleError
    from ember.nn import Gelu

    class Inner(Module):
        act: Module

    class Outer(Module):
        b: Inner
        head: Linear

    device = Device.flex()
    m = Outer(b=Inner(Relu()), head=LinearConfig(2, 2).init(device))
    m3 = m.to_device(device)
    assert m3.b is m.b  # shared: nothing changed below it
    with pytest.raises(ModuleError, match=r"cannot be assigned.*replace\(act=\.\.\.\)"):
        m3.b.act = Gelu()
    with pytest.raises(ModuleError, match=r"cannot be assigned.*replace\(head=\.\.\.\)"):
        m.head = 5
    assert isinstance(m.b.act, Relu)
    changed = m3.replace(b=m3.b.replace(act=Gelu()))
    assert isinstance(changed.b.act, Gelu) and isinstance(m.b.act, Relu) and isinstance(m3.b.act, Relu)
    assert changed.head is m3.head
    with pytest.raises(ModuleError, match="'tail' is not a field"):
        m.replace(tail=Relu())
    with pytest.raises(ModuleError):
        m.replace(head=LinearConfig(2, 2))  # checked as at construction: a config is not a module
