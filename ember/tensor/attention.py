"""Scaled dot-product attention: PyTorch's ``scaled_dot_product_attention`` and the
core that ``MultiHeadAttention`` shares with it.

``attention`` is a fused op (:mod:`ember.tensor.fused`): a backend with a kernel
(flex: one numpy function) computes the scores, the mask, the softmax, dropout and
the weighted sum in one call, and autodiff has one rule for it; other backends run
its composite (:mod:`ember.backend.composites.attention`). Both give the same values.
"""

from __future__ import annotations

import math
from typing import Any

from ember.backend.distribution import Distribution
from ember.backend.ops import FusedOp
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.checks import BOOL_NP, FLOAT_NP, check_device
from ember.tensor.fused import fused
from ember.tensor.shape import broadcast_shapes
from ember.tensor.tensor import Tensor


def _operand(name: str, t: Any, query: Any) -> Tensor:
    if not isinstance(t, Tensor):
        raise DTypeError(f"ember: scaled_dot_product_attention: {name} must be a Tensor, got {type(t).__name__}")
    if t.rank < 2:
        raise ShapeError(
            f"ember: scaled_dot_product_attention: {name} must have rank >= 2 [..., seq, dim], got {t.dims()}"
        )
    if isinstance(query, Tensor) and t._device is not query._device:
        check_device("scaled_dot_product_attention", query, t)
    return t


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    fill: float = -math.inf,
    scale: float | None = None,
    causal: bool = False,
    dropout: float = 0.0,
    training: bool = True,
    enable_gqa: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(context, weights)``: ``weights = softmax(scale * q @ k^T + bias)`` with the keys
    ``mask`` marks (bool, true hides) and, when ``causal``, each query's later keys set
    to ``fill`` first (a row with every key at ``-inf`` gets zero weights), and
    ``context = dropout(weights) @ value``. ``query`` ``[..., L, E]``, ``key``
    ``[..., S, E]``, ``value`` ``[..., S, Ev]``; ``mask`` and ``bias`` broadcast to
    ``[..., L, S]``; ``scale`` defaults to ``1 / sqrt(E)``. With ``enable_gqa``, key and
    value may have fewer heads (dim -3) than query: each serves ``Hq // Hkv``
    consecutive query heads (as PyTorch's ``enable_gqa``)."""
    query = _operand("query", query, None)
    key = _operand("key", key, query)
    value = _operand("value", value, query)
    if enable_gqa:
        group = _gqa_group(query, key, value)
        if group > 1:
            return _grouped(query, key, value, group, mask, bias, fill, scale, causal, dropout, training)
    device = query._device
    if query._primitive.dtype not in FLOAT_NP:
        query = query.float()
    dtype = query.dtype
    key, value = key.cast(dtype), value.cast(dtype)
    (*bq, n_q, dim), (*bk, n_k, dim_k), (*bv, n_v, _) = query.dims(), key.dims(), value.dims()
    if dim_k != dim or n_v != n_k:
        raise ShapeError(
            f"ember: scaled_dot_product_attention: query {query.dims()}, key {key.dims()} and value {value.dims()} "
            "must be [..., L, E], [..., S, E] and [..., S, Ev]"
        )
    batch = broadcast_shapes(
        "scaled_dot_product_attention",
        broadcast_shapes("scaled_dot_product_attention", tuple(bq), tuple(bk)),
        tuple(bv),
    )
    query = query.expand(batch + (n_q, dim))
    key = key.expand(batch + (n_k, dim))
    value = value.expand(batch + tuple(value.dims()[-2:]))
    full = batch + (n_q, n_k)
    if mask is not None:
        if not isinstance(mask, Tensor) or mask._primitive.dtype != BOOL_NP:
            raise DTypeError(f"ember: scaled_dot_product_attention: the mask must be a bool Tensor, got {mask!r:.80}")
        mask = mask.to_device(device) if mask._device is not device else mask
        mask = _broadcast("mask", mask, full)
    if bias is not None:
        bias = _broadcast("bias", bias.cast(dtype), full)
    scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    if not 0.0 <= dropout <= 1.0:
        raise ValueRangeError(f"ember: scaled_dot_product_attention: dropout must lie in [0, 1], got {dropout}")
    keep = None
    if training and dropout > 0.0:
        keep = Tensor.random(full, Distribution.bernoulli(1.0 - dropout), device=device, dtype=dtype)
        keep = keep.mul_scalar(1.0 / (1.0 - dropout)) if dropout < 1.0 else keep
    context, weights = fused(
        FusedOp.ATTENTION,
        device,
        query._primitive,
        key._primitive,
        value._primitive,
        None if mask is None else mask._primitive,
        None if bias is None else bias._primitive,
        float(fill),
        scale,
        bool(causal),
        None if keep is None else keep._primitive,
    )
    return Tensor(context, device), Tensor(weights, device)


def _gqa_group(query: Tensor, key: Tensor, value: Tensor) -> int:
    """How many query heads share one key/value head (``Hq // Hkv``)."""
    if min(query.rank, key.rank, value.rank) < 3:
        raise ShapeError(
            f"ember: scaled_dot_product_attention: enable_gqa needs [..., heads, seq, dim] operands, got query "
            f"{query.dims()}, key {key.dims()}, value {value.dims()}"
        )
    hq, hk, hv = query.dims()[-3], key.dims()[-3], value.dims()[-3]
    if hk != hv or hk == 0 or hq % hk:
        raise ShapeError(
            f"ember: scaled_dot_product_attention: enable_gqa needs key and value with the same number of heads "
            f"(dim -3) dividing the query's, got query {query.dims()}, key {key.dims()}, value {value.dims()}"
        )
    return hq // hk


def _grouped(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    group: int,
    mask: Tensor | None,
    bias: Tensor | None,
    fill: float,
    scale: float | None,
    causal: bool,
    dropout: float,
    training: bool,
) -> tuple[Tensor, Tensor]:
    """Grouped-query attention without repeating the keys and values: the ``group``
    query heads of one key head become one block of ``group * L`` query rows (masks
    and biases folded the same way), then the results unfold back to ``Hq`` heads."""
    *lead_q, hq, n_q, dim = query.dims()
    n_k, hk = key.dims()[-2], key.dims()[-3]
    lead = broadcast_shapes(
        "scaled_dot_product_attention",
        broadcast_shapes("scaled_dot_product_attention", tuple(lead_q), tuple(key.dims()[:-3])),
        tuple(value.dims()[:-3]),
    )
    device = query._device
    if causal:
        later = (
            Tensor.arange(n_k, device=device)
            .unsqueeze_dim(0)
            .greater(Tensor.arange(n_q, device=device).unsqueeze_dim(1))
        )
        if mask is not None and (not isinstance(mask, Tensor) or mask._primitive.dtype != BOOL_NP):
            raise DTypeError(f"ember: scaled_dot_product_attention: the mask must be a bool Tensor, got {mask!r:.80}")
        mask = later if mask is None else mask.to_device(device).bool_or(later)
    full = lead + (hq, n_q, n_k)
    folded = lead + (hk, group * n_q, n_k)

    def fold(name: str, t: Tensor | None) -> Tensor | None:
        if t is None or not isinstance(t, Tensor):
            return t
        t = t.to_device(device) if t._device is not device else t
        if broadcast_shapes(f"scaled_dot_product_attention ({name})", t._primitive.shape, full) != full:
            raise ShapeError(
                f"ember: scaled_dot_product_attention: the {name} {t.dims()} does not broadcast to {list(full)}"
            )
        dims = [1] * (len(full) - t.rank) + t.dims()
        if dims[-3] == 1:  # the same for every head: repeat its rows once per query head of a group
            return t.reshape(dims).expand(dims[:-2] + [n_q, n_k]).repeat([1] * (len(dims) - 2) + [group, 1])
        return t.expand(full).reshape(folded)

    query = query.reshape(lead_q + [hk, group * n_q, dim])
    context, weights = attention(
        query,
        key,
        value,
        mask=fold("mask", mask),
        bias=fold("bias", bias),
        fill=fill,
        scale=1.0 / math.sqrt(dim) if scale is None else scale,
        dropout=dropout,
        training=training,
    )
    return (
        context.reshape(list(context.dims()[:-3]) + [hq, n_q, context.dims()[-1]]),
        weights.reshape(list(weights.dims()[:-3]) + [hq, n_q, n_k]),
    )


def _broadcast(name: str, t: Tensor, shape: tuple[int, ...]) -> Tensor:
    if broadcast_shapes(f"scaled_dot_product_attention ({name})", t._primitive.shape, shape) != shape:
        raise ShapeError(
            f"ember: scaled_dot_product_attention: the {name} {t.dims()} does not broadcast to {list(shape)}"
        )
    return t.expand(shape) if t._primitive.shape != shape else t


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v`` as ``torch.nn.functional.scaled_dot_product_attention``:
    ``attn_mask`` is a bool tensor (true: take part) or a float tensor added to the
    scores, broadcasting to ``[..., L, S]``; ``is_causal`` lets query ``i`` see keys
    ``j <= i``; ``dropout_p`` drops attention weights with the device's generator;
    ``enable_gqa`` lets key and value have fewer heads (dim -3) than query, each
    serving ``Hq // Hkv`` consecutive query heads."""
    mask = bias = None
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise DTypeError(
                f"ember: scaled_dot_product_attention: attn_mask must be a Tensor, got {type(attn_mask).__name__}"
            )
        if attn_mask._primitive.dtype == BOOL_NP:
            mask = attn_mask.bool_not()
        else:
            bias = attn_mask
    if is_causal and attn_mask is not None:
        raise ValueRangeError("ember: scaled_dot_product_attention: give attn_mask or is_causal, not both (as PyTorch)")
    return attention(
        query,
        key,
        value,
        mask=mask,
        bias=bias,
        scale=scale,
        causal=is_causal,
        dropout=dropout_p,
        training=True,
        enable_gqa=enable_gqa,
    )[0]
