"""Second derivatives: Hessian-vector products through ``backward(create_graph=True)``
and their oracles (float64 finite differences of the first derivative; PyTorch).

For ``L(x) = sum(f(x) * w)`` with fixed random ``w`` and ``S(x) = sum_i <dL/dx_i, v_i>``
with fixed random ``v``, ``dS/dx = H v``: ember computes it with a double backward;
the finite-difference oracle differentiates ``S`` numerically, where ``S`` itself is
computed with ember's (separately tested) first-order backward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ember import Device, Tensor


def _weights(shape: Sequence[int], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.5, 1.5, size=tuple(shape))


def _directions(arrays: Sequence[np.ndarray], wrt: Sequence[int], seed: int) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    return {i: rng.uniform(-1.0, 1.0, size=arrays[i].shape) for i in wrt}


def _tensors(arrays, wrt, device):
    return [
        Tensor.from_data(a, device=device).require_grad() if i in wrt else Tensor.from_data(a, device=device)
        for i, a in enumerate(arrays)
    ]


def _first_order_s(fn: Callable, arrays, wrt, v, seed: int, device: Device) -> float:
    """``S(x)`` with a first-order backward (no graph of the gradients)."""
    tensors = _tensors(arrays, wrt, device)
    out = fn(*tensors)
    w = _weights(out.dims(), seed).astype(out.to_numpy().dtype)
    grads = out.mul(Tensor.from_data(w, device=device)).sum().backward()
    total = 0.0
    for i in wrt:
        g = tensors[i].grad(grads)
        if g is not None:
            total += float((g.to_numpy().astype(np.float64) * v[i]).sum())
    return total


def ember_hvp(fn: Callable, arrays, wrt, seed: int = 0, device: Device | None = None) -> dict[int, np.ndarray]:
    """``H v`` per input by a double backward."""
    device = device or Device.flex().autodiff()
    v = _directions(arrays, wrt, seed)
    tensors = _tensors(arrays, wrt, device)
    out = fn(*tensors)
    w = _weights(out.dims(), seed).astype(out.to_numpy().dtype)
    grads = out.mul(Tensor.from_data(w, device=device)).sum().backward(create_graph=True)
    assert grads.create_graph
    s = None
    for i in wrt:
        g = tensors[i].grad(grads)
        if g is None:
            continue
        assert g.device == device, "create_graph gradients live on the autodiff device"
        term = g.mul(Tensor.from_data(v[i].astype(g.to_numpy().dtype), device=device)).sum()
        s = term if s is None else s.add(term)
    result = {i: np.zeros(arrays[i].shape) for i in wrt}
    if s is None or not s.is_require_grad():
        return result  # the gradient does not depend on the inputs: H v = 0
    second = s.backward()
    for i in wrt:
        g2 = tensors[i].grad(second)
        if g2 is not None:
            assert g2.dims() == list(arrays[i].shape)
            result[i] = g2.to_numpy().astype(np.float64)
    return result


def numeric_hvp(fn: Callable, arrays, wrt, seed: int = 0, eps: float = 1e-6) -> dict[int, np.ndarray]:
    """``H v`` per input by central differences of ``S``."""
    device = Device.flex().autodiff()
    v = _directions(arrays, wrt, seed)
    result = {}
    for i in wrt:
        grad = np.zeros(arrays[i].shape)
        flat = grad.reshape(-1)
        for j in range(arrays[i].size):
            plus = [a.copy() for a in arrays]
            minus = [a.copy() for a in arrays]
            plus[i].reshape(-1)[j] += eps
            minus[i].reshape(-1)[j] -= eps
            s_plus = _first_order_s(fn, plus, wrt, v, seed, device)
            s_minus = _first_order_s(fn, minus, wrt, v, seed, device)
            flat[j] = (s_plus - s_minus) / (2 * eps)
        result[i] = grad
    return result


def torch_hvp(torch, fn: Callable, arrays, wrt, out_shape, seed: int = 0) -> dict[int, np.ndarray]:
    """``H v`` per input with ``torch.autograd.grad(..., create_graph=True)``."""
    v = _directions(arrays, wrt, seed)
    tensors = [
        torch.tensor(a, requires_grad=(i in wrt)) if np.asarray(a).dtype.kind == "f" else torch.tensor(a)
        for i, a in enumerate(arrays)
    ]
    out = fn(torch, *tensors).reshape(tuple(out_shape))
    w = torch.tensor(_weights(out_shape, seed))
    xs = [tensors[i] for i in wrt]
    firsts = torch.autograd.grad((out * w).sum(), xs, create_graph=True, allow_unused=True, materialize_grads=True)
    s = sum((g * torch.tensor(v[i])).sum() for g, i in zip(firsts, wrt))
    if not s.requires_grad:
        return {i: np.zeros(arrays[i].shape) for i in wrt}
    seconds = torch.autograd.grad(s, xs, allow_unused=True, materialize_grads=True)
    return {i: g.detach().numpy() for g, i in zip(seconds, wrt)}
