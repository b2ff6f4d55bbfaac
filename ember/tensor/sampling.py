"""Categorical sampling (``Tensor.multinomial``) from the device's generator.

Written over tensor ops, so it runs on every backend, and drawn from the device's
Philox stream (``device.seed(n)`` makes it reproducible; flex and cube draw the same
uniforms):

* with replacement (and any single draw): each uniform ``u`` picks the first
  category whose cumulative weight exceeds ``u * total``, so a category of weight 0
  is never drawn;
* without replacement: the exponential race (Efraimidis & Spirakis): category ``i``
  gets the key ``log(u_i) / w_i`` and the ``n`` largest keys win, which is the
  distribution of drawing one at a time and renormalising.
"""

from __future__ import annotations

from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.tensor import Tensor


def _check(probs: Tensor, num_samples: int, replacement: bool) -> Tensor:
    if not isinstance(probs, Tensor):
        raise DTypeError(f"ember: multinomial: expected a Tensor of weights, got {type(probs).__name__}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
        raise ValueRangeError(f"ember: multinomial: num_samples must be an int > 0, got {num_samples!r}")
    if probs.rank not in (1, 2):
        raise ShapeError(
            f"ember: multinomial: the weights must be [categories] or [rows, categories] (as PyTorch), got shape "
            f"{probs.dims()}; reshape to [-1, categories] first"
        )
    categories = probs.dims()[-1]
    if categories == 0:
        raise ShapeError("ember: multinomial: there must be at least one category")
    if not replacement and num_samples > categories:
        raise ValueRangeError(
            f"ember: multinomial: cannot draw {num_samples} samples without replacement from {categories} "
            "categories; pass replacement=True"
        )
    weights = probs.detach()
    return weights if weights.is_float() else weights.float()


def _check_values(weights: Tensor, num_samples: int, replacement: bool) -> None:
    """One read of the weights' summary: non-negative, finite, each row with a positive
    weight (and enough of them without replacement)."""
    rows = weights if weights.rank == 2 else weights.unsqueeze_dim(0)
    bad = rows.is_nan().bool_or(rows.is_inf()).bool_or(rows.lower_elem(0.0)).any().into_scalar()
    if bad:
        raise ValueRangeError("ember: multinomial: the weights must be finite and >= 0 (got NaN, inf or a negative)")
    positive = rows.greater_elem(0.0).int().sum_dim(1).min().into_scalar()
    if positive == 0:
        raise ValueRangeError("ember: multinomial: every row needs a weight > 0 (a row sums to 0)")
    if not replacement and num_samples > positive:
        raise ValueRangeError(
            f"ember: multinomial: cannot draw {num_samples} samples without replacement from a row with only "
            f"{positive} categories of weight > 0; pass replacement=True"
        )


def multinomial(probs: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """``num_samples`` category indices (int64) per row of the non-negative weights
    ``probs`` (``[C]`` or ``[R, C]``, not necessarily normalised; as
    ``torch.multinomial``): shape ``[num_samples]`` or ``[R, num_samples]``.

    >>> from ember import Device, Tensor
    >>> device = Device.flex()
    >>> device.seed(0)
    >>> Tensor.from_floats([0.0, 1.0, 0.0], device=device).multinomial(4, replacement=True).tolist()
    [1, 1, 1, 1]
    """
    weights = _check(probs, num_samples, replacement)
    _check_values(weights, num_samples, replacement)
    single = weights.rank == 1
    rows = weights.unsqueeze_dim(0) if single else weights
    n_rows, categories = rows.dims()
    device = rows.device
    if replacement or num_samples == 1:
        cdf = rows.cumsum(1)  # [R, C]
        total = cdf.slice([(0, n_rows), (categories - 1, categories)])  # [R, 1]
        u = Tensor.random([n_rows, num_samples], Distribution.uniform(0.0, 1.0), device=device, dtype=rows.dtype)
        target = u.mul(total)  # [R, n]
        below = cdf.unsqueeze_dim(1).lower_equal(target.unsqueeze_dim(2))  # [R, n, C]
        index = below.int().sum_dim(2).squeeze_dim(2)  # [R, n]
        # Rounding can put u * total at the total: fall back to the last category of weight > 0.
        positions = Tensor.arange(categories, device=device).unsqueeze_dim(0)
        last = rows.greater_elem(0.0).int().mul(positions).max_dim(1)  # [R, 1]
        last = last.expand([n_rows, num_samples])
        index = index.mask_where(index.greater(last), last)
    else:
        u = Tensor.random([n_rows, categories], Distribution.uniform(0.0, 1.0), device=device, dtype=rows.dtype)
        # log(u) / w: a zero weight gives -inf (never among the winners, checked above); u = 0 gives -inf too.
        keys = u.log().div(rows)
        index = keys.topk_with_indices(num_samples, dim=1)[1]
    index = index.cast(DType.INT64)
    return index.squeeze_dim(0) if single else index


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1) -> Tensor:
    """A sample from the Gumbel-softmax distribution (``torch.nn.functional.gumbel_softmax``):
    ``softmax((logits + g) / tau)`` along ``dim`` with ``g = -log(E)``, ``E ~ Exp(1)``
    drawn with the device's generator. With ``hard`` the result is the one-hot of its
    maximum, with the soft sample's gradient (straight-through). ``eps`` is unused, as
    in PyTorch.

    >>> from ember import Device, Tensor
    >>> d = Device.flex()
    >>> d.seed(0)
    >>> y = gumbel_softmax(Tensor.zeros([2, 4], device=d), hard=True)
    >>> y.sum_dim(1).tolist()
    [[1.0], [1.0]]
    """
    if not isinstance(logits, Tensor) or logits.dtype.kind != "float":
        raise DTypeError("ember: gumbel_softmax: logits must be a float Tensor")
    if not tau > 0:
        raise ValueRangeError(f"ember: gumbel_softmax: tau must be > 0, got {tau}")
    dtype = logits.dtype if logits.dtype in (DType.FLOAT32, DType.FLOAT64) else DType.FLOAT32
    # E = -log(U) with U in (0, 1]: 1 - uniform[0, 1) never takes the log of 0.
    u = Tensor.random(logits.dims(), Distribution.uniform(0.0, 1.0), logits.device, dtype).neg().add_scalar(1.0)
    gumbels = u.log().neg().log().neg().cast(logits.dtype)
    soft = logits.add(gumbels).div_scalar(tau).softmax(dim)
    if not hard:
        return soft
    rank = logits.rank
    axis = dim + rank if dim < 0 else dim
    index = soft.argmax(axis)  # keeps the dim
    hot = Tensor.zeros(soft.dims(), soft.device, soft.dtype).scatter(
        axis, index, index.ones_like().cast(soft.dtype), "assign"
    )
    return hot.sub(soft.detach()).add(soft)
