"""The op classes of issue 31 against PyTorch, on every device of the conformance fixture.

One table of cases: each gives ember's call, torch's, and inputs on the edge that the
class is about (tensor bounds that broadcast, dims of a 0-d tensor, gradient kinks and
ties, int dtypes, broadcasting and negative padding). Values, shapes and dtypes are
checked on every device; gradients (of a fixed weighting of the outputs) on the autodiff
ones, for the inputs listed in ``grads``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from ember import Tensor
from tests.conftest import assert_close

pytestmark = pytest.mark.torch
NAN = math.nan
INF = math.inf


def _torch():
    return __import__("torch")


@dataclass(frozen=True)
class Case:
    """``ember(*tensors)`` against ``torch(*tensors)`` at ``inputs`` (numpy arrays, made
    into tensors of their own dtype); gradients for the float inputs in ``grads``."""

    ember: Callable[..., Any]
    torch: Callable[..., Any]
    inputs: tuple
    grads: tuple[int, ...] = (0,)
    rtol: float = 1e-6


def f32(*values: Any) -> np.ndarray:
    return np.array(values, np.float32)


def i64(*values: Any) -> np.ndarray:
    return np.array(values, np.int64)


X = f32(1.0, 5.0, 3.0, NAN, 2.0, 2.0, 0.0, -INF, 4.0)
LO = f32(2.0, 0.0, 3.0, 0.0, NAN, 3.0, 1.0, 0.0, 4.0)
HI = f32([4.0], [1.0], [4.0])
XS = np.broadcast_to(X, (3, 9)).copy()

CLAMP = {
    "clamp(tensor, tensor)": Case(
        lambda x, lo, hi: x.clamp(lo, hi), lambda x, lo, hi: x.clamp(lo, hi), (XS, LO, HI), (0, 1, 2)
    ),
    "clamp(tensor, None)": Case(lambda x, lo: x.clamp(lo), lambda x, lo: x.clamp(lo), (XS, LO), (0, 1)),
    "clamp(None, tensor)": Case(lambda x, hi: x.clamp(None, hi), lambda x, hi: x.clamp(None, hi), (XS, HI), (0, 1)),
    "clamp_min(tensor)": Case(lambda x, lo: x.clamp_min(lo), lambda x, lo: x.clamp_min(lo), (XS, LO), (0, 1)),
    "clamp_max(tensor)": Case(lambda x, hi: x.clamp_max(hi), lambda x, hi: x.clamp_max(hi), (XS, HI), (0, 1)),
    "clamp broadcasts self": Case(
        lambda x, lo, hi: x.clamp(lo, hi), lambda x, lo, hi: x.expand(3, 9).clamp(lo, hi), (X, LO, HI), (0, 1, 2)
    ),
    "clamp min > max gives max": Case(
        lambda x, lo, hi: x.clamp(lo, hi),
        lambda x, lo, hi: x.clamp(lo, hi),
        (f32(0.0, 5.0, 9.0, 3.0), f32(4.0), f32(2.0, 2.0, 2.0, 4.0)),
        (0, 1, 2),
    ),
    "clamp of int64 by int64": Case(
        lambda x, lo: x.clamp(lo), lambda x, lo: x.clamp(lo), (i64(-3, 0, 7), i64(0, 1, 2)), ()
    ),
    "clamp of int64 by float32": Case(
        lambda x, lo, hi: x.clamp(lo, hi),
        lambda x, lo, hi: x.clamp(lo, hi),
        (i64(-3, 0, 7), f32(0.5), f32(6.5)),
        (1, 2),
    ),
    "clamp of float16 by float32": Case(
        lambda x, lo: x.clamp(lo), lambda x, lo: x.clamp(lo), (np.array([1.0, -2.0], np.float16), f32(0.25, 0.0)), ()
    ),
}

CASES = {**CLAMP}


def _weights(shape) -> np.ndarray:
    """A fixed weighting of the outputs, so that each output's gradient differs."""
    n = int(np.prod(shape))
    return (1.0 + np.arange(n, dtype=np.float32) / max(n, 1)).reshape(shape)


@pytest.mark.parametrize("name", list(CASES))
def test_value_dtype_and_gradient_match_torch(device, torch, name):
    case = CASES[name]
    ad = device.is_autodiff()
    inputs = [Tensor.from_data(a, device=device) for a in case.inputs]
    if ad:
        inputs = [t.require_grad() if i in case.grads else t for i, t in enumerate(inputs)]
    t_inputs = [torch.tensor(a, requires_grad=i in case.grads) for i, a in enumerate(case.inputs)]
    out = case.ember(*inputs)
    ref = case.torch(*t_inputs)
    assert str(out.dtype) == str(ref.dtype).removeprefix("torch."), (out.dtype, ref.dtype)
    rtol = case.rtol * (10 if device.backend_name == "cube" else 1)
    assert_close(out, ref.detach().float().numpy(), rtol=rtol, atol=rtol)
    if not ad or not case.grads:
        return
    w = _weights(tuple(ref.shape))
    grads = out.mul(Tensor.from_data(w, device=device)).sum().backward()
    (ref * torch.from_numpy(w)).sum().backward()
    for i in case.grads:
        g = inputs[i].grad(grads)
        assert g is not None, f"no gradient for input {i}"
        assert_close(g, t_inputs[i].grad.numpy(), rtol=rtol, atol=rtol)
