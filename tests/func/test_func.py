"""``ember.func``: grad, value_and_grad, vjp, jvp, hessian_vector_product, apply_updates."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Module, Tensor
from ember.errors import ConfigError, DTypeError, GraphError, ShapeError
from ember.func import apply_updates, grad, hessian_vector_product, jvp, value_and_grad, vjp
from ember.nn import Linear, LinearConfig, Relu, Tanh
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams
from tests.shared_models import Mlp

# torch.func imports torch.jit, which warns about its own deprecation.
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")


class TanhMlp(Module):
    l1: Linear
    act: Tanh
    l2: Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.act(self.l1(x)))


def seed_problem(device: Device):
    device.seed(42)
    x = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)).add_scalar(0.5)
    model = Mlp(l1=LinearConfig(4, 16).init(device), act=Relu(), l2=LinearConfig(16, 1).init(device))
    return x, y, model


def mse(model: Module, x: Tensor, y: Tensor) -> Tensor:
    return MseLoss().forward(model(x), y, Reduction.MEAN)


def cubic(x: Tensor) -> Tensor:
    return x.powi_scalar(3).sum()


X = [1.0, -2.0, 0.5]


# ---------------------------------------------------------------------- tensors
def test_grad_of_a_tensor_function_on_a_plain_device(flex):
    x = Tensor.from_floats(X, device=flex)
    g = grad(cubic)(x)
    assert g.device == flex and not g.is_require_grad()
    np.testing.assert_allclose(g.to_numpy(), 3 * np.square(X), rtol=1e-6)
    value, g2 = value_and_grad(cubic)(x)
    assert value.device == flex
    np.testing.assert_allclose(value.to_numpy(), [np.sum(np.power(X, 3))], rtol=1e-6)
    np.testing.assert_array_equal(g.to_numpy(), g2.to_numpy())


def test_grad_keeps_an_autodiff_argument_on_its_device():
    ad = Device.flex().autodiff()
    x = Tensor.from_floats(X, device=ad)
    g = grad(cubic)(x)
    assert g.device == ad and not g.is_require_grad()
    np.testing.assert_allclose(g.to_numpy(), 3 * np.square(X), rtol=1e-6)


def test_grad_of_grad_is_the_second_derivative_and_higher_orders_compose(flex):
    x = Tensor.from_floats(X, device=flex, dtype="float64")
    d1 = grad(cubic)
    d2 = grad(lambda x: d1(x).sum())
    d3 = grad(lambda x: d2(x).sum())
    d4 = grad(lambda x: d3(x).sum())
    np.testing.assert_allclose(d2(x).to_numpy(), 6 * np.array(X))
    np.testing.assert_allclose(d3(x).to_numpy(), [6.0, 6.0, 6.0])
    np.testing.assert_allclose(d4(x).to_numpy(), [0.0, 0.0, 0.0])


def test_argnums_has_aux_and_containers(flex):
    a = Tensor.from_floats([1.0, 2.0], device=flex)
    b = Tensor.from_floats([3.0, -1.0], device=flex)

    def f(a, b, scale):
        out = a.mul(b).sum().mul_scalar(scale)
        return out, {"double": out.mul_scalar(2.0)}

    (value, aux), (ga, gb) = value_and_grad(f, argnums=(0, 1), has_aux=True)(a, b, 2.0)
    assert value.tolist() == [2.0] and aux["double"].tolist() == [4.0]
    assert ga.tolist() == [6.0, -2.0] and gb.tolist() == [2.0, 4.0]
    gb_only, aux = grad(f, argnums=-2, has_aux=True)(a, b, 2.0)
    assert gb_only.tolist() == [2.0, 4.0]

    def g(pair, named):
        return pair[0].mul(named["w"]).sum().add(pair[1].square().sum())

    gp, gn = grad(g, argnums=(0, 1))((a, b), {"w": b})
    assert isinstance(gp, tuple) and isinstance(gn, dict)
    assert gp[0].tolist() == [3.0, -1.0] and gp[1].tolist() == [6.0, -2.0] and gn["w"].tolist() == [1.0, 2.0]


def test_the_same_tensor_in_two_positions_gets_each_its_own_gradient(flex):
    x = Tensor.from_floats([2.0], device=flex)
    ga, gb = grad(lambda a, b: a.mul(b.square()).sum(), argnums=(0, 1))(x, x)
    assert ga.tolist() == [4.0] and gb.tolist() == [8.0]


def test_an_output_that_does_not_depend_on_the_argument_has_zero_gradient(flex):
    x = Tensor.from_floats([2.0, 3.0], device=flex)
    assert grad(lambda x: Tensor.ones([1], device=flex), argnums=0)(x).tolist() == [0.0, 0.0]
    assert grad(lambda x, y: y.sum(), argnums=0)(x, x.mul_scalar(2.0)).tolist() == [0.0, 0.0]


def test_errors_name_the_problem(flex):
    x = Tensor.from_floats([1.0, 2.0], device=flex)
    with pytest.raises(ShapeError, match="one element"):
        grad(lambda x: x.exp())(x)
    with pytest.raises(DTypeError, match="int64"):
        grad(lambda x: x.float().sum())(Tensor.from_ints([1, 2], device=flex))
    with pytest.raises(ConfigError, match="argnums"):
        grad(cubic, argnums=3)(x)
    with pytest.raises(ConfigError, match="pair"):
        grad(cubic, has_aux=True)(x)
    with pytest.raises(GraphError, match="Tensors, Modules"):
        grad(lambda s: Tensor.ones([1], device=flex))(3.0)
    plain_model = Mlp(l1=LinearConfig(4, 2).init(flex), act=Relu(), l2=LinearConfig(2, 1).init(flex))
    with pytest.raises(GraphError, match="autodiff"):
        grad(lambda m: m(Tensor.ones([1, 4], device=flex)).sum())(plain_model)


# ---------------------------------------------------------------------- modules
def test_grad_of_a_module_is_gradients_params_matching_backward():
    ad = Device.flex().autodiff()
    x, y, model = seed_problem(ad)
    (value, grads) = value_and_grad(mse)(model, x, y)
    assert isinstance(grads, GradientsParams) and len(grads) == 4
    reference = GradientsParams.from_grads(mse(model, x, y).backward(), model)
    np.testing.assert_allclose(value.to_numpy(), mse(model, x, y).to_numpy())
    for pid, g in reference.items():
        assert grads.get(pid).device == ad.inner()
        np.testing.assert_allclose(grads.get(pid).to_numpy(), g.to_numpy(), rtol=1e-6)


def test_frozen_parameters_get_no_gradient():
    ad = Device.flex().autodiff()
    x, y, model = seed_problem(ad)
    frozen = model.map_params(lambda p, path: p.set_require_grad(not path.startswith("l1")))
    grads = grad(mse)(frozen, x, y)
    assert {path for path, p in frozen.named_params() if p.id in grads} == {"l2.weight", "l2.bias"}


def test_value_and_grad_trains_the_seed_mlp_like_backward():
    ad = Device.flex().autodiff()

    def run(use_func: bool) -> list[float]:
        x, y, model = seed_problem(ad)
        optim = AdamConfig().init()
        losses = []
        for _ in range(5):
            if use_func:
                loss, grads = value_and_grad(mse)(model, x, y)
            else:
                loss = mse(model, x, y)
                grads = GradientsParams.from_grads(loss.backward(), model)
            losses.append(loss.into_scalar())
            model = optim.step(1e-2, model, grads)
        return losses

    assert run(True) == run(False)


# ---------------------------------------------------------------------- vjp, jvp, hvp
def _torch_mlp(torch, model: Module, activation: str = "relu"):
    params = {path: torch.tensor(p.val().to_numpy().astype(np.float64)) for path, p in model.named_params()}
    act = torch.relu if activation == "relu" else torch.tanh

    def forward(p, x):
        return act(x @ p["l1.weight"] + p["l1.bias"]) @ p["l2.weight"] + p["l2.bias"]

    return params, forward


@pytest.mark.torch
def test_vjp_and_jvp_match_torch(flex, torch):
    rng = np.random.default_rng(0)
    x_np, w_np = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    ct_np, tx_np, tw_np = rng.standard_normal((3, 2)), rng.standard_normal((3, 4)), rng.standard_normal((4, 2))

    def f(x, w):
        return x.matmul(w).tanh()

    def tf(x, w):
        return torch.tanh(x @ w)

    x, w = Tensor.from_data(x_np, device=flex), Tensor.from_data(w_np, device=flex)
    out, vjp_fn = vjp(f, x, w)
    gx, gw = vjp_fn(Tensor.from_data(ct_np, device=flex))
    gx2, _ = vjp_fn(Tensor.from_data(ct_np, device=flex))  # callable again
    t_out, t_vjp = torch.func.vjp(tf, torch.tensor(x_np), torch.tensor(w_np))
    t_gx, t_gw = t_vjp(torch.tensor(ct_np))
    np.testing.assert_allclose(out.to_numpy(), t_out.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gx.to_numpy(), t_gx.numpy(), rtol=1e-10)
    np.testing.assert_allclose(gw.to_numpy(), t_gw.numpy(), rtol=1e-10)
    np.testing.assert_array_equal(gx.to_numpy(), gx2.to_numpy())

    value, tangent_out = jvp(f, (x, w), (Tensor.from_data(tx_np, device=flex), Tensor.from_data(tw_np, device=flex)))
    t_value, t_tangent = torch.func.jvp(
        tf, (torch.tensor(x_np), torch.tensor(w_np)), (torch.tensor(tx_np), torch.tensor(tw_np))
    )
    assert value.device == flex and tangent_out.device == flex
    np.testing.assert_allclose(value.to_numpy(), t_value.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tangent_out.to_numpy(), t_tangent.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.torch
def test_hessian_vector_product_of_the_seed_mlp_matches_torch(torch):
    ad = Device.flex().autodiff()
    x, y, model = seed_problem(ad)
    model = model.map_params(lambda p, path: ember.Param.from_mapped_value(p.id, p.val().cast("float64")))
    x, y = x.cast("float64"), y.cast("float64")
    rng = np.random.default_rng(1)
    paths = {p.id: path for path, p in model.named_params()}
    v_np = {path: rng.standard_normal(tuple(p.shape)) for path, p in model.named_params()}
    v = GradientsParams()
    for path, p in model.named_params():
        v.register(p.id, Tensor.from_data(v_np[path], device=ad.inner()))
    hv = hessian_vector_product(mse, (model, x, y), v)
    assert isinstance(hv, GradientsParams) and len(hv) == 4

    params, forward = _torch_mlp(torch, model)
    tx, ty = torch.tensor(x.to_numpy()), torch.tensor(y.to_numpy())

    def loss_of(p):
        return ((forward(p, tx) - ty) ** 2).mean()

    _, t_hv = torch.func.jvp(torch.func.grad(loss_of), (params,), ({k: torch.tensor(a) for k, a in v_np.items()},))
    for pid, g in hv.items():
        np.testing.assert_allclose(g.to_numpy(), t_hv[paths[pid]].numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.torch
def test_maml_step_through_an_inner_update_matches_torch(torch):
    ad = Device.flex().autodiff()
    ad.seed(5)
    model = TanhMlp(l1=LinearConfig(3, 8).init(ad), act=Tanh(), l2=LinearConfig(8, 1).init(ad))
    model = model.map_params(lambda p, path: ember.Param.from_mapped_value(p.id, p.val().cast("float64")))
    rng = np.random.default_rng(2)
    xs, ys, xq, yq = (rng.standard_normal(s) for s in [(10, 3), (10, 1), (10, 3), (10, 1)])
    inner_lr = 0.1

    def loss_fn(m, x, y):
        return m(x).sub(y).square().mean()

    def meta_loss(m):
        fast_grads = grad(loss_fn)(m, Tensor.from_data(xs, device=ad), Tensor.from_data(ys, device=ad))
        fast = apply_updates(m, fast_grads, lambda p, g: p.sub(g.mul_scalar(inner_lr)))
        return loss_fn(fast, Tensor.from_data(xq, device=ad), Tensor.from_data(yq, device=ad))

    value, meta_grads = value_and_grad(meta_loss)(model)

    params, forward = _torch_mlp(torch, model, "tanh")
    tp = {k: t.requires_grad_(True) for k, t in params.items()}

    def t_loss(p, x, y):
        return ((forward(p, torch.tensor(x)) - torch.tensor(y)) ** 2).mean()

    inner = torch.autograd.grad(t_loss(tp, xs, ys), list(tp.values()), create_graph=True)
    fast = {k: p - inner_lr * g for (k, p), g in zip(tp.items(), inner)}
    t_meta = t_loss(fast, xq, yq)
    t_grads = torch.autograd.grad(t_meta, list(tp.values()))
    np.testing.assert_allclose(value.to_numpy(), [t_meta.item()], rtol=1e-12)
    by_path = {path: p.id for path, p in model.named_params()}
    for (path, _), t_g in zip(tp.items(), t_grads):
        np.testing.assert_allclose(meta_grads.get(by_path[path]).to_numpy(), t_g.numpy(), rtol=1e-9, atol=1e-12)


def test_hessian_vector_product_of_a_tensor_function(flex):
    x = Tensor.from_floats([0.5, -1.0], device=flex, dtype="float64")
    v = Tensor.from_floats([1.0, 2.0], device=flex, dtype="float64")
    hv = hessian_vector_product(lambda x: x[0:1].mul(x[1:2]).add(x.powi_scalar(3)).sum(), x, v)
    # f = 2 x0 x1 + x0^3 + x1^3 (the [1] product broadcasts over two elements): H = [[6 x0, 2], [2, 6 x1]]
    np.testing.assert_allclose(hv.to_numpy(), [6 * 0.5 * 1 + 2 * 2, 2 * 1 + 6 * -1.0 * 2])


# ---------------------------------------------------------------------- ember.compile
def test_compiled_value_and_grad_step_matches_eager():
    ad = Device.flex().autodiff()
    loss_and_grads = value_and_grad(mse)

    def step(model, x, y, optim, lr):
        loss, grads = loss_and_grads(model, x, y)
        return optim.step(lr, model, grads), loss

    def run(compiled: bool) -> list[float]:
        x, y, model = seed_problem(ad)
        optim = AdamConfig().init()
        fn = ember.compile(lambda m, x, y, lr: step(m, x, y, optim, lr)) if compiled else None
        losses = []
        for _ in range(6):
            if compiled:
                model, loss = fn(model, x, y, 1e-2)
            else:
                model, loss = step(model, x, y, optim, 1e-2)
            losses.append(loss.into_scalar())
        if compiled:
            # the first step (no optimizer state yet) has its own trace
            assert fn.stats["traces"] == 2 and fn.stats["replays"] == 4 and fn.stats["eager"] == 0
        return losses

    np.testing.assert_allclose(run(True), run(False), rtol=1e-6)


def test_compiled_gradient_penalty_traces():
    """A double backward (grad of a grad) inside a compiled step."""
    ad = Device.flex().autodiff()

    def penalty_loss(model, x, y):
        gx = grad(lambda x: model(x).sum())(x)
        return mse(model, x, y).add(gx.square().sum_dim(1).sub_scalar(1.0).square().mean())

    def run(compiled: bool) -> list[float]:
        x, y, model = seed_problem(ad)
        optim = AdamConfig().init()

        def step(m, x, y):
            loss, grads = value_and_grad(penalty_loss)(m, x, y)
            return optim.step(1e-2, m, grads), loss

        fn = ember.compile(step) if compiled else step
        losses = []
        for _ in range(4):
            model, loss = fn(model, x, y)
            losses.append(loss.into_scalar())
        if compiled:
            assert fn.stats["eager"] == 0 and fn.stats["replays"] == 2
        return losses

    np.testing.assert_allclose(run(True), run(False), rtol=1e-6)
