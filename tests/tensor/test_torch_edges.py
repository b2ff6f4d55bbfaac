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
from ember.errors import DTypeError, EmberError
from tests.conftest import assert_close

pytestmark = pytest.mark.torch
NAN = math.nan
INF = math.inf


def _torch():
    return __import__("torch")


def _tf():
    return _torch().nn.functional


def _F():
    import ember.nn.functional

    return ember.nn.functional


@dataclass(frozen=True)
class Case:
    """``ember(*tensors)`` against ``torch(*tensors)`` at ``inputs`` (numpy arrays, made
    into tensors of their own dtype); gradients for the float inputs in ``grads``."""

    ember: Callable[..., Any]
    torch: Callable[..., Any]
    inputs: tuple
    grads: tuple[int, ...] = (0,)
    rtol: float = 1e-6
    atol: float | None = None  # rtol when None


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

S = np.array(3.0, np.float32)  # shape []
SI = np.array(0, np.int64)
SV = np.array(-1.5, np.float32)

# Dims 0 and -1 of a 0-d tensor name the tensor itself (PyTorch's maybe_wrap_dim).
RANK0 = {
    "sum_dim(0)": Case(lambda x: x.sum_dim(0), lambda x: x.sum(0, keepdim=True), (S,)),
    "sum_dims_squeeze([-1])": Case(lambda x: x.sum_dims_squeeze([-1]), lambda x: x.sum(-1), (S,)),
    "mean_dim(-1)": Case(lambda x: x.mean_dim(-1), lambda x: x.mean(-1, keepdim=True), (S,)),
    "prod_dim(0)": Case(lambda x: x.prod_dim(0), lambda x: x.prod(0, keepdim=True), (S,)),
    "max_dim(0)": Case(lambda x: x.max_dim(0), lambda x: x.max(0, keepdim=True).values, (S,)),
    "min_dim_with_indices(-1)": Case(
        lambda x: x.min_dim_with_indices(-1)[1], lambda x: x.min(-1, keepdim=True).indices, (S,), ()
    ),
    "amax(0)": Case(lambda x: x.amax(0), lambda x: x.amax(0), (S,)),
    "amin(-1, keepdim)": Case(lambda x: x.amin(-1, keepdim=True), lambda x: x.amin(-1, keepdim=True), (S,)),
    "argmax(0)": Case(lambda x: x.argmax(0), lambda x: x.argmax(0, keepdim=True), (S,), ()),
    "argmin(-1, keepdim=False)": Case(lambda x: x.argmin(-1, keepdim=False), lambda x: x.argmin(-1), (S,), ()),
    "any_dim(0)": Case(lambda x: x.any_dim(0), lambda x: x.any(0, keepdim=True), (S,), ()),
    "var(0, correction=0)": Case(
        lambda x: x.var(0, correction=0), lambda x: x.var(0, keepdim=True, correction=0), (S,)
    ),
    "std(-1, correction=0)": Case(
        lambda x: x.std(-1, correction=0), lambda x: x.std(-1, keepdim=True, correction=0), (S,)
    ),
    "logsumexp(0)": Case(lambda x: x.logsumexp(0), lambda x: x.logsumexp(0, keepdim=True), (S,)),
    "norm(2, 0)": Case(lambda x: x.norm(2.0, 0), lambda x: x.norm(dim=0, keepdim=True), (SV,)),
    "count_nonzero(0)": Case(lambda x: x.count_nonzero(0), lambda x: x.count_nonzero(0), (S,), ()),
    "cumsum(0)": Case(lambda x: x.cumsum(0), lambda x: x.cumsum(0), (S,)),
    "cumprod(-1)": Case(lambda x: x.cumprod(-1), lambda x: x.cumprod(-1), (S,)),
    "cummax_with_indices(0)": Case(lambda x: x.cummax_with_indices(0)[1], lambda x: x.cummax(0).indices, (S,), ()),
    "cummin(0)": Case(lambda x: x.cummin(0), lambda x: x.cummin(0).values, (S,)),
    "logcumsumexp(-1)": Case(lambda x: x.logcumsumexp(-1), lambda x: x.logcumsumexp(-1), (S,)),
    "softmax(-1)": Case(lambda x: x.softmax(-1), lambda x: x.softmax(-1), (S,)),
    "log_softmax(0)": Case(lambda x: x.log_softmax(0), lambda x: x.log_softmax(0), (S,)),
    "sort(0)": Case(lambda x: x.sort(0), lambda x: x.sort(0).values, (S,)),
    "argsort()": Case(lambda x: x.argsort(), lambda x: x.argsort(), (S,), ()),
    "topk(1, 0)": Case(lambda x: x.topk(1, 0), lambda x: x.topk(1, 0).values, (S,)),
    "median(0)": Case(lambda x: x.median(0), lambda x: x.median(0, keepdim=True).values, (S,)),
    "kthvalue(1, -1)": Case(lambda x: x.kthvalue(1, -1)[0], lambda x: x.kthvalue(1, -1, keepdim=True).values, (S,)),
    "gather(0, 0-d index)": Case(lambda x, i: x.gather(0, i), lambda x, i: x.gather(0, i), (S, SI)),
    "scatter(0, assign)": Case(
        lambda x, i, v: x.scatter(0, i, v, "assign"), lambda x, i, v: x.scatter(0, i, v), (S, SI, SV), (0, 2)
    ),
    "scatter_reduce(0, amax)": Case(
        lambda x, i, v: x.scatter_reduce(0, i, v, "amax"),
        lambda x, i, v: x.scatter_reduce(0, i, v, "amax"),
        (S, SI, SV),
    ),
    "select(0, [0])": Case(lambda x, i: x.select(0, i), lambda x, i: x.index_select(0, i), (S, i64(0))),
    "flip(0)": Case(lambda x: x.flip(0), lambda x: x.flip(0), (S,)),
    "swap_dims(0, -1)": Case(lambda x: x.swap_dims(0, -1), lambda x: x.transpose(0, -1), (S,)),
    "movedim(0, -1)": Case(lambda x: x.movedim(0, -1), lambda x: x.movedim(0, -1), (S,)),
    "squeeze(0)": Case(lambda x: x.squeeze(0), lambda x: x.squeeze(0), (S,)),
    "squeeze_dim(-1)": Case(lambda x: x.squeeze_dim(-1), lambda x: x.squeeze(-1), (S,)),
    "cosine_similarity(dim=0)": Case(
        lambda x, y: _F().cosine_similarity(x, y, 0), lambda x, y: _tf().cosine_similarity(x, y, 0), (S, SV), (0, 1)
    ),
    "normalize(dim=0)": Case(lambda x: _F().normalize(x, dim=0), lambda x: _tf().normalize(x, dim=0), (SV,)),
}

SQ = np.arange(3, dtype=np.float32).reshape(1, 3, 1)

# PyTorch's squeeze keeps a named dim whose size is not 1.
SQUEEZE = {
    "squeeze(1) of [1, 3, 1]": Case(lambda x: x.squeeze(1), lambda x: x.squeeze(1), (SQ,)),
    "squeeze(-1) of [1, 3, 1]": Case(lambda x: x.squeeze(-1), lambda x: x.squeeze(-1), (SQ,)),
    "squeeze((0, 1, 2)) of [1, 3, 1]": Case(lambda x: x.squeeze((0, 1, 2)), lambda x: x.squeeze((0, 1, 2)), (SQ,)),
    "squeeze([1]) of [1, 3, 1]": Case(lambda x: x.squeeze([1]), lambda x: x.squeeze((1,)), (SQ,)),
}

FX = f32(0.0, -0.0, 0.0, 3.0, -3.0, 3.0, 7.5, -7.5, 1e-8, -4.5)
FY = f32(2.0, 2.0, -2.0, 3.0, 1.5, INF, -2.0, 2.0, 1.0, -1.5)
XL = f32(0.0, 0.0, 0.0, 0.0, -0.0, 1.0, 2.0, 0.5, 0.0, 3.0)
YL = f32(2.0, 0.5, 1.0, 0.0, 3.0, 3.0, NAN, 0.0, -1.0, INF)
LOGIT = f32(-0.5, -1e-3, 0.0, 0.25, 0.5, 0.75, 1.0, 1.001, 1.5)
MA = f32(1.0, 2.0, NAN, 1.0, NAN, -1.0, 0.5, -INF)
MB = f32(1.0, 1.0, 1.0, NAN, NAN, -1.0, 3.0, -INF)

# Gradients at the points where a composite's subgradient differs from PyTorch's.
EDGE_GRADIENTS = {
    "fmod(tensor, tensor)": Case(lambda x, y: x.fmod(y), lambda x, y: x.fmod(y), (FX, FY), (0, 1)),
    "fmod(tensor, scalar)": Case(lambda x: x.fmod(-2.0), lambda x: x.fmod(-2.0), (FX,)),
    "fmod of int64": Case(lambda x, y: x.fmod(y), lambda x, y: x.fmod(y), (i64(0, 7, -7, 5), i64(3, -2, 2, 5)), ()),
    "xlogy": Case(lambda x, y: x.xlogy(y), lambda x, y: x.xlogy(y), (XL, YL), (0,)),
    "xlogy gradient of y": Case(
        lambda x, y: x.xlogy(y), lambda x, y: x.xlogy(y), (XL[[0, 1, 5, 6]], YL[[0, 1, 5, 6]]), (0, 1)
    ),
    "logit": Case(lambda p: p.logit(), lambda p: p.logit(), (LOGIT,)),
    "logit(eps=0.1)": Case(lambda p: p.logit(0.1), lambda p: p.logit(0.1), (LOGIT,)),
    "fmax": Case(lambda a, b: a.fmax(b), lambda a, b: a.fmax(b), (MA, MB), (0, 1)),
    "fmin": Case(lambda a, b: a.fmin(b), lambda a, b: a.fmin(b), (MA, MB), (0, 1)),
    "fmax broadcast": Case(lambda a, b: a.fmax(b), lambda a, b: a.fmax(b), (MA.reshape(2, 4), f32(1.0)), (0, 1)),
}

IMAGE = (np.arange(48, dtype=np.int64).reshape(1, 2, 4, 6) * 37 % 256).astype(np.uint8)
INTS = i64(-3, 0, 1, 5, 6, 9, -1)

# Shapes of 0-d inputs and dtypes of int and uint8 inputs.
SHAPES_AND_DTYPES = {
    "mse_loss of 0-d (gradient shape [])": Case(
        lambda x, t: _F().mse_loss(x, t), lambda x, t: _tf().mse_loss(x, t).reshape(1), (S, SV), (0, 1)
    ),
    "prelu of 0-d": Case(lambda x, a: _F().prelu(x, a), lambda x, a: _tf().prelu(x, a), (SV, f32(0.25)), (0, 1)),
    "prelu with a 0-d weight": Case(
        lambda x, a: _F().prelu(x, a),
        lambda x, a: _tf().prelu(x, a),
        (f32([-1.0, 2.0, 0.0], [3.0, -4.0, 0.5]), np.array(0.25, np.float32)),
        (0, 1),
    ),
    "relu of int64": Case(lambda x: _F().relu(x), lambda x: _tf().relu(x), (INTS,), ()),
    "relu6 of int64": Case(lambda x: _F().relu6(x), lambda x: _tf().relu6(x), (INTS,), ()),
    "hard_tanh of int64": Case(lambda x: _F().hard_tanh(x), lambda x: _tf().hardtanh(x), (INTS,), ()),
    "hard_tanh(-2.5, 3.5) of int32": Case(
        lambda x: _F().hard_tanh(x, -2.5, 3.5), lambda x: _tf().hardtanh(x, -2.5, 3.5), (INTS.astype(np.int32),), ()
    ),
    "threshold(1.5, 7.5) of int64": Case(
        lambda x: _F().threshold(x, 1.5, 7.5), lambda x: _tf().threshold(x, 1.5, 7.5), (INTS,), ()
    ),
    "threshold(-1, 4) of uint8": Case(
        lambda x: _F().threshold(x, 2, 4), lambda x: _tf().threshold(x, 2, 4), (i64(0, 2, 3, 200).astype(np.uint8),), ()
    ),
    # PyTorch's uint8 kernels weigh in fixed point: a value at a half may round the other way.
    "bilinear interpolate of uint8": Case(
        lambda x: _F().interpolate(x, size=(3, 7), mode="bilinear"),
        lambda x: _tf().interpolate(x, size=(3, 7), mode="bilinear"),
        (IMAGE,),
        (),
        atol=1.0,
    ),
    "bilinear interpolate of uint8, align_corners": Case(
        lambda x: _F().interpolate(x, size=(5, 4), mode="bilinear", align_corners=True),
        lambda x: _tf().interpolate(x, size=(5, 4), mode="bilinear", align_corners=True),
        (IMAGE,),
        (),
        atol=1.0,
    ),
    "bicubic interpolate of uint8": Case(
        lambda x: _F().interpolate(x, size=(7, 9), mode="bicubic"),
        lambda x: _tf().interpolate(x, size=(7, 9), mode="bicubic"),
        (IMAGE,),
        (),
        atol=1.0,
    ),
}

R = np.random.default_rng(5)
C1, C2 = R.standard_normal((1, 2, 3)).astype(np.float32), R.standard_normal((2, 1, 3)).astype(np.float32)
ROW3 = np.arange(3, dtype=np.float32).reshape(1, 1, 3)
ROW4 = np.arange(4, dtype=np.float32).reshape(1, 1, 4)
GRID = np.arange(20, dtype=np.float32).reshape(1, 4, 5)


def _pad(widths: tuple, mode: str) -> Case:
    return Case(lambda x: x.pad(widths, mode=mode), lambda x: _tf().pad(x, widths, mode=mode), (GRID,))


# Broadcasting both ways, and negative padding widths with the modes that read the input.
BROADCAST_AND_PAD = {
    "cosine_similarity [1,2,3] and [2,1,3]": Case(
        lambda a, b: _F().cosine_similarity(a, b, -1), lambda a, b: _tf().cosine_similarity(a, b, -1), (C1, C2), (0, 1)
    ),
    "cosine_similarity [2,3] and [2,1,3], dim 0": Case(
        lambda a, b: _F().cosine_similarity(a, b, 0), lambda a, b: _tf().cosine_similarity(a, b, 0), (C1[0], C2), (0, 1)
    ),
    "pad (-1, 2) reflect of [0, 1, 2]": Case(
        lambda x: x.pad((-1, 2), mode="reflect"), lambda x: _tf().pad(x, (-1, 2), mode="reflect"), (ROW3,)
    ),
    "pad (-4, 5) replicate of width 4": Case(
        lambda x: x.pad((-4, 5), mode="replicate"), lambda x: _tf().pad(x, (-4, 5), mode="replicate"), (ROW4,)
    ),
    "pad (2, -1) reflect": _pad((2, -1), "reflect"),
    "pad (3, -3) reflect": _pad((3, -3), "reflect"),
    "pad (-2, 1, 2, -3) reflect": _pad((-2, 1, 2, -3), "reflect"),
    "pad (-1, 3, -2, 2) replicate": _pad((-1, 3, -2, 2), "replicate"),
    "pad (0, -5, 1, 0) replicate": _pad((0, -5, 1, 0), "replicate"),
    "pad (-1, 3) circular": _pad((-1, 3), "circular"),
    "pad (-1, 2, 1, -2) constant": Case(
        lambda x: x.pad((-1, 2, 1, -2), 7.0), lambda x: _tf().pad(x, (-1, 2, 1, -2), value=7.0), (GRID,)
    ),
}

SPECIAL = f32(NAN, INF, -INF, 0.0, -0.0, 1e-8, -1e-8, 0.5, -0.99, -1.0, -1.5, 3e38)
_PS = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5]
PA = f32(*[a for a in _PS for _ in _PS])
PB = f32(*[b for _ in _PS for b in _PS])

# NaN, infinities and signed zeros through the math functions whose GPU versions leave
# them undefined (C's special values, as PyTorch; the signs of zeros are checked below).
SPECIAL_VALUES = {
    "atan of special values": Case(lambda x: x.atan(), lambda x: x.atan(), (SPECIAL,)),
    "log1p of special values": Case(lambda x: x.log1p(), lambda x: x.log1p(), (SPECIAL,)),
    "pow(tensor, tensor) of special values": Case(lambda a, b: a.powf(b), lambda a, b: a.pow(b), (PA, PB), ()),
    "pow(-0.0, -1.0)": Case(lambda a: a.powf_scalar(-1.0), lambda a: a.pow(-1.0), (f32(-0.0, 0.0, -INF),)),
    "pow(x, 3.0) of signed zeros": Case(lambda a: a.powf_scalar(3.0), lambda a: a.pow(3.0), (f32(-0.0, 0.0, -INF),)),
    "pow(x, inf) at |x| = 1": Case(
        lambda a: a.powf_scalar(INF), lambda a: a.pow(INF), (f32(1.0, -1.0, 0.5, -2.0, -0.0),), ()
    ),
}

# A 5x5 plane whose window maxima sit at the windows' first row and column: the pool's
# indices (at most 12) fit the default 4x4 unpooled plane though the input plane is 25.
UNPOOL = np.full((1, 2, 5, 5), -1.0, np.float32)
UNPOOL[:, :, :4:2, :4:2] = f32([[1.0, 2.0], [3.0, 4.0]]) * f32(1.0, -0.5).reshape(2, 1, 1)
ARGMAX_0 = f32([1.0, 0.0, 0.5], [2.0, -1.0, 2.0])


def _unpool2d(x):
    return _F().max_unpool2d(*_F().max_pool2d_with_indices(x, 2), 2)


def _torch_unpool2d(x):
    return _tf().max_unpool2d(*_tf().max_pool2d(x, 2, return_indices=True), 2)


# Indices whose known range (a pooling's input plane, an argmax's dim) is wider than
# their values, used where only the values fit.
INDEX_RANGES = {
    "max_unpool2d of max_pool2d_with_indices": Case(_unpool2d, _torch_unpool2d, (UNPOOL,)),
    "max_unpool1d of max_pool1d_with_indices": Case(
        lambda x: _F().max_unpool1d(*_F().max_pool1d_with_indices(x, 2), 2),
        lambda x: _tf().max_unpool1d(*_tf().max_pool1d(x, 2, return_indices=True), 2),
        (UNPOOL[:, :, 0],),
    ),
    "gather at an argmax into a dim of 1": Case(
        lambda x, y: y.gather(1, x.argmax(1)),
        lambda x, y: y.gather(1, x.argmax(1, keepdim=True)),
        (ARGMAX_0, f32([5.0], [7.0])),
        (1,),
    ),
}

LIN_W = R.standard_normal((3, 4)).astype(np.float32)  # ember's [d_in, d_out]
LIN_B = R.standard_normal(4).astype(np.float32)
VEC = f32(0.5, -1.0, 2.0)

# linear of a vector gives [d_out], as PyTorch's (whose weight is [d_out, d_in]).
LINEAR_OF_A_VECTOR = {
    "linear of a 1-d input": Case(
        lambda x, w, b: _F().linear(x, w, b), lambda x, w, b: _tf().linear(x, w.T, b), (VEC, LIN_W, LIN_B), (0, 1, 2)
    ),
    "linear of a 1-d input, no bias": Case(
        lambda x, w: _F().linear(x, w), lambda x, w: _tf().linear(x, w.T), (VEC, LIN_W), (0, 1)
    ),
}

CASES = {
    **CLAMP,
    **RANK0,
    **SQUEEZE,
    **EDGE_GRADIENTS,
    **SHAPES_AND_DTYPES,
    **BROADCAST_AND_PAD,
    **SPECIAL_VALUES,
    **INDEX_RANGES,
    **LINEAR_OF_A_VECTOR,
}


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
    atol = rtol if case.atol is None else case.atol
    assert_close(out, ref.detach().float().numpy(), rtol=rtol, atol=atol)
    if not ad or not case.grads:
        return
    w = _weights(tuple(ref.shape))
    grads = out.mul(Tensor.from_data(w, device=device)).sum().backward()
    (ref * torch.from_numpy(w)).sum().backward()
    for i in case.grads:
        g = inputs[i].grad(grads)
        assert g is not None, f"no gradient for input {i}"
        assert_close(g, t_inputs[i].grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", list(SPECIAL_VALUES))
def test_special_values_keep_the_sign_of_zeros_and_infinities(device, torch, name):
    case = SPECIAL_VALUES[name]
    out = case.ember(*[Tensor.from_data(a, device=device) for a in case.inputs]).to_numpy()
    ref = case.torch(*[torch.tensor(a) for a in case.inputs]).numpy()
    signed = (ref == 0) | np.isinf(ref)
    assert np.array_equal(np.signbit(out[signed]), np.signbit(ref[signed])), (out, ref)


# Where PyTorch refuses a dim of a 0-d tensor, ember raises its own error.
RANK0_REFUSED = {
    "sum_dim(1)": (lambda x: x.sum_dim(1), lambda x: x.sum(1, keepdim=True)),
    "softmax(-2)": (lambda x: x.softmax(-2), lambda x: x.softmax(-2)),
    "sum_dims([0, -1])": (lambda x: x.sum_dims([0, -1]), lambda x: x.sum([0, -1], keepdim=True)),
    "narrow(0, 0, 1)": (lambda x: x.narrow(0, 0, 1), lambda x: x.narrow(0, 0, 1)),
    "chunk(1, 0)": (lambda x: x.chunk(1, 0), lambda x: x.chunk(1, 0)),
    "split(1, 0)": (lambda x: x.split(1, 0), lambda x: x.split(1, 0)),
    "cat(0)": (lambda x: Tensor.cat([x, x], 0), lambda x: _torch().cat([x, x], 0)),
    "select_dim(0, 0)": (lambda x: x.select_dim(0, 0), lambda x: x.select(0, 0)),
    "unbind(0)": (lambda x: x.unbind(0), lambda x: x.unbind(0)),
    "roll(1, 0)": (lambda x: x.roll(1, 0), lambda x: x.roll(1, 0)),
    "size(0)": (lambda x: x.size(0), lambda x: x.size(0)),
    "glu(0)": (lambda x: _F().glu(x, 0), lambda x: _tf().glu(x, 0)),
}


@pytest.mark.parametrize("name", list(RANK0_REFUSED))
def test_a_dim_of_a_0d_tensor_that_torch_refuses_raises_an_ember_error(device, torch, name):
    ours, theirs = RANK0_REFUSED[name]
    with pytest.raises((RuntimeError, IndexError, TypeError)):
        theirs(torch.tensor(3.0))
    with pytest.raises(EmberError, match="ember: "):
        ours(Tensor.from_data(S, device=device))


EXACT_SPECIAL = f32(0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.7931356, -0.70846689, -4988429.0, -1001.2, INF, -INF, NAN)
EXACT_SPECIAL = np.concatenate([EXACT_SPECIAL, f32(1e-40, -1e-40, 3e38, -3e38, 1e-8, 5e-39)])


def test_remainder_fmod_and_floor_div_are_exact(device):
    """Against numpy's float32 (C's fmod: exact): every pair of special values and
    random pairs whose quotients span 40 decades (cube once computed
    ``x - y * trunc(x / y)`` in float32, off by up to a divisor)."""
    r = np.random.default_rng(31)
    a = np.repeat(EXACT_SPECIAL, len(EXACT_SPECIAL))
    b = np.tile(EXACT_SPECIAL, len(EXACT_SPECIAL))
    a = np.concatenate([a, (r.standard_normal(4000) * 10.0 ** r.integers(-10, 10, 4000)).astype(np.float32)])
    b = np.concatenate([b, (r.standard_normal(4000) * 10.0 ** r.integers(-10, 10, 4000)).astype(np.float32)])
    x, y = Tensor.from_data(a, device=device), Tensor.from_data(b, device=device)
    with np.errstate(all="ignore"):
        expected = {"remainder": np.remainder(a, b), "fmod": np.fmod(a, b), "floor_div": np.floor_divide(a, b)}
    for name, out in (("remainder", x.remainder(y)), ("fmod", x.fmod(y)), ("floor_div", x.floor_div(y))):
        np.testing.assert_array_equal(out.to_numpy(), expected[name], err_msg=name)


def test_the_remainders_of_the_issue_match_torch(device, torch):
    x = Tensor.from_floats([7.7931356, -4988429.0], device=device)
    y = Tensor.from_floats([-0.70846689, -1001.2], device=device)
    tx, ty = torch.tensor([7.7931356, -4988429.0]), torch.tensor([-0.70846689, -1001.2])
    np.testing.assert_array_equal(x.fmod(y).to_numpy()[:1], torch.fmod(tx, ty).numpy()[:1])
    np.testing.assert_array_equal(x.remainder(y).to_numpy()[1:], torch.remainder(tx, ty).numpy()[1:])


DTYPE_REFUSALS = {
    "scatter of float32 values into float16": (
        lambda t: t.zeros([4], dtype="float16").scatter(0, t.from_ints([0, 1]), t.from_floats([1.0, 2.0]), "assign"),
        lambda torch: torch.zeros(4, dtype=torch.float16).scatter(0, torch.tensor([0, 1]), torch.tensor([1.0, 2.0])),
    ),
    "scatter (add) of int64 values into float32": (
        lambda t: t.zeros([4]).scatter(0, t.from_ints([0, 1]), t.from_ints([1, 2])),
        lambda torch: torch.zeros(4).scatter_add(0, torch.tensor([0, 1]), torch.tensor([1, 2])),
    ),
    "scatter_reduce of float32 values into float16": (
        lambda t: t.zeros([4], dtype="float16").scatter_reduce(
            0, t.from_ints([0, 1]), t.from_floats([1.0, 2.0]), "sum"
        ),
        lambda torch: torch.zeros(4, dtype=torch.float16).scatter_reduce(
            0, torch.tensor([0, 1]), torch.tensor([1.0, 2.0]), "sum"
        ),
    ),
    "linspace of bool": (
        lambda t: t.linspace(0, 1, 3, dtype="bool"),
        lambda torch: torch.linspace(0, 1, 3, dtype=torch.bool),
    ),
}


@pytest.mark.parametrize("name", list(DTYPE_REFUSALS))
def test_dtypes_torch_refuses_raise_a_dtype_error(device, torch, name):
    ours, theirs = DTYPE_REFUSALS[name]

    class On:  # the Tensor constructors, on this device
        @staticmethod
        def zeros(shape, dtype=None):
            return Tensor.zeros(shape, device=device, dtype=dtype)

        @staticmethod
        def from_ints(values):
            return Tensor.from_ints(values, device=device)

        @staticmethod
        def from_floats(values):
            return Tensor.from_floats(values, device=device)

        @staticmethod
        def linspace(start, end, steps, dtype=None):
            return Tensor.linspace(start, end, steps, device=device, dtype=dtype)

    with pytest.raises(RuntimeError):
        theirs(torch)
    with pytest.raises(DTypeError, match="ember: "):
        ours(On)


ARANGES = [
    (0.0, -8.000001, -4, "int64"),
    (0.5, 3.7, 1, "int64"),
    (0, 5.5, 1.5, "int64"),
    (-0.5, 3, 1, "int32"),
    (10.9, 0.2, -2.5, "int64"),
    (0.0, -8.000001, -4, "float32"),
    (0, 5.5, 1.5, None),
]


@pytest.mark.parametrize("start, end, step, dtype", ARANGES)
def test_arange_with_float_bounds_follows_torch(device, torch, start, end, step, dtype):
    out = Tensor.arange(start, end, step, device=device, dtype=dtype)
    ref = torch.arange(start, end, step, dtype=None if dtype is None else getattr(torch, dtype))
    assert str(out.dtype) == str(ref.dtype).removeprefix("torch.")
    assert out.tolist() == pytest.approx(ref.tolist())
