"""``backward(create_graph=True)``: the API, memory, and whole-model checks against
PyTorch (Hessian-vector products of the seed MLP, a WGAN-GP critic step)."""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import numpy as np
import pytest

from ember import Device, Module, Tensor
from ember.backend.autodiff import Checkpointing
from ember.errors import GraphError, ShapeError
from ember.nn import Linear, LinearConfig, Relu, Tanh
from ember.optim import AdamConfig, GradientsParams
from tests.shared_models import Mlp


@pytest.fixture
def ad():
    return Device.flex().autodiff()


class Critic(Module):
    l1: Linear
    act: Tanh
    l2: Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.act(self.l1(x)))


def _numpy_params(model: Module) -> dict[str, np.ndarray]:
    return {path: p.val().to_numpy().copy() for path, p in model.named_params()}


# ---------------------------------------------------------------------- the API
def test_create_graph_gradients_are_tracked_on_the_autodiff_device(ad):
    x = Tensor.from_floats([1.0, 2.0, 3.0], device=ad).require_grad()
    grads = x.powi_scalar(3).sum().backward(create_graph=True)
    assert grads.create_graph and "create_graph" in repr(grads)
    g = x.grad(grads)
    assert g.device == ad and g.is_require_grad()
    np.testing.assert_allclose(g.to_numpy(), [3.0, 12.0, 27.0])
    h = x.grad(g.sum().backward(create_graph=True))
    np.testing.assert_allclose(h.to_numpy(), [6.0, 12.0, 18.0])
    third = x.grad(h.sum().backward())
    assert third.device == Device.flex()
    np.testing.assert_allclose(third.to_numpy(), [6.0, 6.0, 6.0])


def test_higher_orders_of_exp_and_sin(ad):
    x = Tensor.from_floats([0.3, -1.2], device=ad, dtype="float64").require_grad()
    g = x.sin()
    for order in range(1, 6):
        g = x.grad(g.sum().backward(create_graph=True))
        expected = [np.sin, np.cos, lambda v: -np.sin(v), lambda v: -np.cos(v)][order % 4](np.array([0.3, -1.2]))
        np.testing.assert_allclose(g.to_numpy(), expected, rtol=1e-12)


def test_create_graph_keeps_the_first_graph_for_another_backward(ad):
    x = Tensor.from_floats([2.0], device=ad).require_grad()
    loss = x.mul(x).sum()
    g1 = x.grad(loss.backward(create_graph=True))
    g2 = x.grad(loss.backward())  # retained by create_graph
    assert g1.tolist() == [4.0] and g2.tolist() == [4.0]
    with pytest.raises(GraphError, match="already used"):
        loss.backward()


def test_retain_graph(ad):
    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    loss = x.exp().sum()
    first = x.grad(loss.backward(retain_graph=True))
    second = x.grad(loss.backward())
    np.testing.assert_array_equal(first.to_numpy(), second.to_numpy())


def test_gradient_seed_and_inputs(ad):
    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    w = Tensor.from_floats([3.0, 4.0], device=ad).require_grad()
    h = x.mul(w)
    out = h.exp()
    seed = Tensor.from_floats([1.0, -1.0], device=ad)
    grads = out.backward(gradient=seed, inputs=[h, x])
    np.testing.assert_allclose(h.grad(grads).to_numpy(), [np.exp(3.0), -np.exp(8.0)], rtol=1e-6)
    np.testing.assert_allclose(x.grad(grads).to_numpy(), [3 * np.exp(3.0), -4 * np.exp(8.0)], rtol=1e-6)
    assert w.grad(grads) is None  # not asked for
    with pytest.raises(ShapeError, match="gradient"):
        out.backward(gradient=Tensor.ones([3], device=ad))


def test_inputs_leave_the_graph_below_them_usable(ad):
    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    h = x.exp()
    y = h.mul(h).sum()
    gh = h.grad(y.backward(inputs=[h]))
    np.testing.assert_allclose(gh.to_numpy(), 2 * np.exp([1.0, 2.0]), rtol=1e-6)
    gx = x.grad(h.sum().backward())  # h's own graph was not consumed
    np.testing.assert_allclose(gx.to_numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


def test_create_graph_under_balanced_checkpointing_matches_disabled():
    def second(device):
        x = Tensor.from_floats([0.2, -0.7, 1.1], device=device, dtype="float64").require_grad()
        y = x.sin().exp().mul(x).tanh().sum()
        g = x.grad(y.backward(create_graph=True))
        return x.grad(g.mul(g).sum().backward()).to_numpy()

    np.testing.assert_array_equal(
        second(Device.flex().autodiff(Checkpointing.BALANCED)), second(Device.flex().autodiff())
    )


# ---------------------------------------------------------------------- memory
def _graph_nodes(tensor: Tensor) -> list:
    seen, stack = {}, [tensor.primitive.node]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        stack.extend(node.parents)
        for value in node.saved or ():
            stack.append(getattr(value, "node", None))
    return list(seen.values())


def _double_backward(device):
    device.seed(3)
    x = Tensor.random([32, 8], device=device).require_grad()
    w = Tensor.random([8, 8], device=device).require_grad()
    loss = x.matmul(w).tanh().square().mean()
    grads = loss.backward(create_graph=True)
    penalty = x.grad(grads).square().sum()
    return x, w, loss, penalty


def test_double_backward_frees_every_node(ad):
    gc.disable()  # the graph must be freed by reference counting alone: no cycles
    try:
        x, w, loss, penalty = _double_backward(ad)
        refs = [weakref.ref(n) for n in _graph_nodes(penalty)]
        assert len(refs) > 10
        second = penalty.backward()
        assert w.grad(second) is not None
        del x, w, loss, penalty, second
        alive = [r for r in refs if r() is not None]
        assert not alive, f"{len(alive)} of {len(refs)} nodes are still alive"
    finally:
        gc.enable()


def test_unused_create_graph_gradients_free_their_graph(ad):
    gc.disable()
    try:
        x, w, loss, penalty = _double_backward(ad)
        refs = [weakref.ref(n) for n in _graph_nodes(penalty)]
        del x, w, loss, penalty  # never differentiated a second time
        assert all(r() is None for r in refs)
    finally:
        gc.enable()


def test_memory_stays_flat_over_double_backward_steps(ad):
    def step():
        x, w, loss, penalty = _double_backward(ad)
        penalty.add(loss).backward()

    for _ in range(20):
        step()
    gc.collect()
    tracemalloc.start()
    for _ in range(100):
        step()
    early, _ = tracemalloc.get_traced_memory()
    for _ in range(300):
        step()
    late, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert late - early < 64 * 1024, f"memory grew by {late - early} bytes over 300 double backwards"


# ---------------------------------------------------------------------- against torch
@pytest.mark.torch
def test_hessian_vector_product_of_the_seed_mlp_matches_torch(ad, torch):
    ad.seed(42)
    model = Mlp(l1=LinearConfig(4, 16).init(ad), act=Relu(), l2=LinearConfig(16, 1).init(ad))
    rng = np.random.default_rng(0)
    x_np = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
    y_np = (x_np @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.5).astype(np.float32)
    params = model.named_params()
    v = {path: rng.standard_normal(tuple(p.shape)).astype(np.float32) for path, p in params}

    x, y = Tensor.from_data(x_np, device=ad), Tensor.from_data(y_np, device=ad)
    loss = model(x).sub(y).square().mean()
    grads = loss.backward(create_graph=True)
    s = None
    for path, p in params:
        term = p.val().grad(grads).mul(Tensor.from_data(v[path], device=ad)).sum()
        s = term if s is None else s.add(term)
    second = s.backward()
    ours = {path: p.val().grad(second).to_numpy() for path, p in params}

    tp = {path: torch.tensor(a, requires_grad=True) for path, a in _numpy_params(model).items()}
    h = torch.relu(torch.from_numpy(x_np) @ tp["l1.weight"] + tp["l1.bias"])
    t_loss = ((h @ tp["l2.weight"] + tp["l2.bias"] - torch.from_numpy(y_np)) ** 2).mean()
    names = list(tp)
    firsts = torch.autograd.grad(t_loss, [tp[n] for n in names], create_graph=True)
    t_s = sum((g * torch.from_numpy(v[n])).sum() for g, n in zip(firsts, names))
    theirs = torch.autograd.grad(t_s, [tp[n] for n in names])
    for n, t in zip(names, theirs):
        np.testing.assert_allclose(ours[n], t.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)


def _wgan_data(step: int):
    rng = np.random.default_rng(100 + step)
    real = rng.normal(1.0, 0.5, (32, 2)).astype(np.float32)
    fake = rng.normal(-1.0, 0.7, (32, 2)).astype(np.float32)
    eps = rng.uniform(0, 1, (32, 1)).astype(np.float32)
    return real, fake, eps


LAMBDA = 10.0


def _ember_critic_step(critic, optim, real_np, fake_np, eps_np, device):
    real, fake = Tensor.from_data(real_np, device=device), Tensor.from_data(fake_np, device=device)
    eps = Tensor.from_data(eps_np, device=device)
    mixed = real.mul(eps).add(fake.mul(eps.neg().add_scalar(1.0))).require_grad()
    d_mixed = critic(mixed)
    g = mixed.grad(d_mixed.sum().backward(create_graph=True, inputs=[mixed]))
    norms = g.square().sum_dim(1).add_scalar(1e-12).sqrt()
    penalty = norms.sub_scalar(1.0).square().mean().mul_scalar(LAMBDA)
    loss = critic(fake).mean().sub(critic(real).mean()).add(penalty)
    value = loss.into_scalar()
    grads = GradientsParams.from_grads(loss.backward(), critic)
    return optim.step(1e-3, critic, grads), value


@pytest.mark.torch
def test_wgan_gp_critic_steps_match_torch(ad, torch):
    ad.seed(7)
    critic = Critic(l1=LinearConfig(2, 16).init(ad), act=Tanh(), l2=LinearConfig(16, 1).init(ad))
    tp = {path: torch.tensor(a, requires_grad=True) for path, a in _numpy_params(critic).items()}
    t_optim = torch.optim.Adam(list(tp.values()), lr=1e-3, eps=1e-5)

    def t_critic(x):
        return torch.tanh(x @ tp["l1.weight"] + tp["l1.bias"]) @ tp["l2.weight"] + tp["l2.bias"]

    optim = AdamConfig().init()
    for step in range(5):
        real_np, fake_np, eps_np = _wgan_data(step)
        critic, value = _ember_critic_step(critic, optim, real_np, fake_np, eps_np, ad)

        real, fake, eps = (torch.from_numpy(a) for a in (real_np, fake_np, eps_np))
        mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
        (g,) = torch.autograd.grad(t_critic(mixed).sum(), mixed, create_graph=True)
        penalty = LAMBDA * ((g.square().sum(1) + 1e-12).sqrt() - 1).square().mean()
        t_loss = t_critic(fake).mean() - t_critic(real).mean() + penalty
        t_optim.zero_grad()
        t_loss.backward()
        t_optim.step()
        np.testing.assert_allclose(value, t_loss.item(), rtol=1e-5, err_msg=f"loss at step {step}")
    for path, a in _numpy_params(critic).items():
        np.testing.assert_allclose(a, tp[path].detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=path)


def test_a_rule_without_a_second_derivative_raises_naming_the_op():
    """The one backward step that cannot be differentiated again (a move between
    devices) says so when create_graph asks for it; a plain backward still works."""
    from tests.conftest import _gpu_device

    flex, gpu = Device.flex().autodiff(), _gpu_device().autodiff()
    x = Tensor.from_floats([1.0, 2.0], device=flex).require_grad()
    moved = x.to_device(gpu)
    loss = moved.mul(moved).sum()
    with pytest.raises(GraphError, match=r"create_graph=True.*move between devices \(to_device\)"):
        loss.backward(create_graph=True)
    x = Tensor.from_floats([1.0, 2.0], device=flex).require_grad()
    moved = x.to_device(gpu)
    grads = moved.mul(moved).sum().backward()
    np.testing.assert_allclose(x.grad(grads).to_data().to_numpy(), [2.0, 4.0])
