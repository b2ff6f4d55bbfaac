"""Central finite differences in float64 against ember's backward."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ember import Device, Tensor


def numeric_grad(fn: Callable, arrays: list[np.ndarray], weights: np.ndarray, index: int, eps: float) -> np.ndarray:
    plain = Device.flex()

    def value(arrs):
        out = fn(*[Tensor.from_data(a, device=plain) for a in arrs]).to_numpy()
        return float((out.astype(np.float64) * weights).sum())

    base = arrays[index]
    grad = np.zeros_like(base)
    flat = grad.reshape(-1)
    for j in range(base.size):
        plus = [a.copy() for a in arrays]
        minus = [a.copy() for a in arrays]
        plus[index].reshape(-1)[j] += eps
        minus[index].reshape(-1)[j] -= eps
        flat[j] = (value(plus) - value(minus)) / (2 * eps)
    return grad


def check_grad(
    fn: Callable,
    arrays: Sequence[np.ndarray],
    *,
    wrt: Sequence[int] | None = None,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    device: Device | None = None,
    seed: int = 0,
) -> None:
    """Assert that ember's gradients of ``sum(fn(*inputs) * w)`` (random ``w``) match
    central differences, for each input in ``wrt`` (default: every float input)."""
    device = device or Device.flex().autodiff()
    arrays = [np.asarray(a) for a in arrays]
    wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if wrt is None else list(wrt)
    tensors = [
        Tensor.from_data(a, device=device).require_grad() if i in wrt else Tensor.from_data(a, device=device)
        for i, a in enumerate(arrays)
    ]
    out = fn(*tensors)
    rng = np.random.default_rng(seed)
    weights = rng.uniform(0.5, 1.5, size=tuple(out.dims()))
    loss = out.mul(Tensor.from_data(weights.astype(out.to_numpy().dtype), device=device)).sum()
    grads = loss.backward()
    for i in wrt:
        analytic = tensors[i].grad(grads)
        numeric = numeric_grad(fn, arrays, weights, i, eps)
        if analytic is None:
            np.testing.assert_allclose(numeric, 0.0, atol=atol, err_msg=f"input {i}: no gradient")
            continue
        assert analytic.dims() == list(arrays[i].shape), f"input {i}: gradient shape {analytic.dims()}"
        np.testing.assert_allclose(analytic.to_numpy(), numeric, rtol=rtol, atol=atol, err_msg=f"input {i}")
