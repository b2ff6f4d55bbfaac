"""The shared test problem: a float64 MLP 4-8-3 (tanh) on a fixed regression batch,
trained by ember on ``Device.flex().autodiff()`` and by PyTorch from the same weights.

ember's ``Linear`` weight is ``[d_input, d_output]``, PyTorch's ``[out, in]``: the
PyTorch side is built from (and reported as) transposes, so trajectories compare
path by path in ember's layout.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ember import Device, Module, Tensor
from ember.module import Param
from ember.nn import Linear, Tanh
from ember.nn.loss import MseLoss, Reduction
from ember.optim import GradientsParams
from tests.conftest import parity_device

AD = parity_device()  # flex+autodiff, or EMBER_PARITY_DEVICE (cuda+autodiff on a GPU machine)
PATHS = ("l1.weight", "l1.bias", "l2.weight", "l2.bias")
TORCH_PATHS = {"l1.weight": "0.weight", "l1.bias": "0.bias", "l2.weight": "2.weight", "l2.bias": "2.bias"}
STEPS = 50


class TanhMlp(Module):
    """The optimizer problems' model: tanh between two Linear layers (4-8-3), torch-shaped."""

    l1: Linear
    act: Tanh
    l2: Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.act(self.l1(x)))


def problem(seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Initial weights (ember layout), inputs [32, 4] and targets [32, 3]."""
    rng = np.random.default_rng(seed)
    weights = {
        "l1.weight": rng.normal(0.0, 0.5, (4, 8)),
        "l1.bias": rng.normal(0.0, 0.1, (8,)),
        "l2.weight": rng.normal(0.0, 0.5, (8, 3)),
        "l2.bias": rng.normal(0.0, 0.1, (3,)),
    }
    x = rng.uniform(-1.0, 1.0, (32, 4))
    y = np.sin(x @ rng.normal(size=(4, 3))) + 0.1 * rng.normal(size=(32, 3))
    return weights, x, y


def ember_model(weights: dict[str, np.ndarray], device: Device = AD) -> TanhMlp:
    def linear(name: str) -> Linear:
        return Linear(
            weight=Param.from_tensor(Tensor.from_data(weights[f"{name}.weight"], device=device)),
            bias=Param.from_tensor(Tensor.from_data(weights[f"{name}.bias"], device=device)),
        )

    return TanhMlp(l1=linear("l1"), act=Tanh(), l2=linear("l2"))


def snapshot(model: Module) -> dict[str, np.ndarray]:
    return {path: param.val().to_numpy().copy() for path, param in model.named_params()}


def ember_loss(model: TanhMlp, x: np.ndarray, y: np.ndarray) -> Tensor:
    xs, ys = Tensor.from_data(x, device=AD), Tensor.from_data(y, device=AD)
    return MseLoss().forward(model(xs), ys, Reduction.MEAN)


def ember_run(
    optim, lr: float | Callable[[int], float], seed: int = 0, steps: int = STEPS, model: TanhMlp | None = None
) -> tuple[list[dict[str, np.ndarray]], list[float]]:
    """Parameters after each step, and the loss before each step."""
    weights, x, y = problem(seed)
    model = model if model is not None else ember_model(weights)
    params, losses = [], []
    for step in range(steps):
        loss = ember_loss(model, x, y)
        losses.append(loss.into_scalar())
        grads = GradientsParams.from_grads(loss.backward(), model)
        model = optim.step(lr(step) if callable(lr) else lr, model, grads)
        params.append(snapshot(model))
    return params, losses


def torch_model(torch, weights: dict[str, np.ndarray]):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    with torch.no_grad():
        for path, tpath in TORCH_PATHS.items():
            value = weights[path].T if path.endswith("weight") else weights[path]
            model.get_parameter(tpath).copy_(torch.from_numpy(np.ascontiguousarray(value)))
    return model


def torch_snapshot(model) -> dict[str, np.ndarray]:
    out = {}
    for path, tpath in TORCH_PATHS.items():
        value = model.get_parameter(tpath).detach().numpy().copy()
        out[path] = value.T if path.endswith("weight") else value
    return out


def torch_run(
    torch,
    make_optimizers: Callable,
    seed: int = 0,
    steps: int = STEPS,
    before_step: Callable | None = None,
    after_step: Callable | None = None,
):
    """PyTorch's trajectory: ``make_optimizers(model)`` returns a list of optimizers;
    ``before_step(model)`` runs between backward and step (e.g. clipping),
    ``after_step(optimizers)`` after the step (e.g. a scheduler's step)."""
    weights, x, y = problem(seed)
    model = torch_model(torch, weights)
    optimizers = make_optimizers(model)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    params, losses = [], []
    for _ in range(steps):
        for opt in optimizers:
            opt.zero_grad()
        loss = ((model(xs) - ys) ** 2).mean()
        losses.append(loss.item())
        loss.backward()
        if before_step is not None:
            before_step(model)
        for opt in optimizers:
            opt.step()
        if after_step is not None:
            after_step(optimizers)
        params.append(torch_snapshot(model))
    return params, losses


def assert_trajectories_close(actual, expected, rtol: float = 1e-5) -> None:
    """Every parameter after every step, and every loss, within ``rtol`` (relative to
    the tensor's largest magnitude, so tiny entries do not dominate)."""
    (a_params, a_losses), (e_params, e_losses) = actual, expected
    assert len(a_params) == len(e_params)
    np.testing.assert_allclose(a_losses, e_losses, rtol=rtol, atol=0.0)
    for step, (a, e) in enumerate(zip(a_params, e_params)):
        assert set(a) == set(e), f"step {step}: parameters {sorted(a)} != {sorted(e)}"
        for path in e:
            scale = max(np.abs(e[path]).max(), 1e-12)
            error = np.abs(a[path] - e[path]).max() / scale
            assert error <= rtol, f"step {step}, {path}: relative error {error:.3e} > {rtol}"


def assert_moved(params: list[dict[str, np.ndarray]], seed: int = 0) -> None:
    """The trajectory is not trivial: every parameter changed."""
    weights, _, _ = problem(seed)
    for path in PATHS:
        assert not np.allclose(params[-1][path], weights[path]), f"{path} did not move"
