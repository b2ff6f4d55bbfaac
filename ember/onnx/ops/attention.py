"""``Attention`` (opsets 23-25): scaled dot-product attention over 3-d (``[batch, seq,
heads * head_size]``, with ``q_num_heads``/``kv_num_heads``) or 4-d (``[batch, heads, seq,
head_size]``) inputs, with grouped key/value heads, a boolean or additive mask (padded to
the key length), ``is_causal`` aligned to the cache (bottom-right), a sliding window,
``past_key``/``past_value`` (the present ones returned), ``nonpad_kv_seqlen``, ``softcap``
and the ``qk_matmul_output`` modes, as ONNX's reference computes them.

The masks that depend only on shapes (causal, window, padding lengths) are built on the
host; the products, softmax and mask arithmetic run on ember's ops (differentiable)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.dtypes import ember_dtype
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor


def _heads(x: Tensor, heads: int) -> Tensor:
    """``[batch, seq, heads * size]`` as ``[batch, heads, seq, size]``."""
    b, s, hidden = x.dims()
    return x.reshape([b, s, heads, hidden // heads]).permute([0, 2, 1, 3])


def _repeat_heads(x: Tensor, reps: int) -> Tensor:
    """Each head repeated ``reps`` times in place (``[h0, h0, h1, h1]``, as ``np.repeat``)."""
    b, h, s, d = x.dims()
    return x.unsqueeze_dim(2).expand([b, h, reps, s, d]).reshape([b, h * reps, s, d])


def _host_bias(
    q_len: int, kv_len: int, causal: bool, window: tuple[int, int], offset: Any, nonpad: np.ndarray | None
) -> np.ndarray | None:
    """The additive bias (0 or -inf) of the causal, window and padding masks, shaped
    ``[batch or 1, 1, q_len, kv_len]``; ``None`` when there is none."""
    left, right = window
    if not causal and left < 0 and right < 0 and nonpad is None:
        return None
    i = np.arange(q_len).reshape(1, q_len, 1)
    j = np.arange(kv_len).reshape(1, 1, kv_len)
    shift = np.reshape(offset, (-1, 1, 1))  # per batch, or one value
    allowed = np.ones((shift.shape[0], q_len, kv_len), bool)
    if causal:
        allowed &= j <= i + shift
    if left >= 0:
        allowed &= (i + shift) - j <= left
    if right >= 0:
        allowed &= j - (i + shift) <= right
    if nonpad is not None:
        allowed = allowed & (j < nonpad.reshape(-1, 1, 1))
    return np.where(allowed, 0.0, -np.inf).astype(np.float32)[:, None]


@op("Attention", host=(6,), since=23)
def attention(node: Node) -> Callable[..., Any]:
    causal = bool(node.attr("is_causal", 0))
    q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
    scale_attr = node.attr("scale")
    softcap = float(node.attr("softcap", 0.0))
    mode = int(node.attr("qk_matmul_output_mode", 0))
    precision = node.attr("softmax_precision")
    window = (int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1)))
    wanted = len(node.outputs)

    def run(
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        past_k: Tensor | None = None,
        past_v: Tensor | None = None,
        nonpad: Any = None,
    ) -> Any:
        three = q.rank == 3
        if three:
            if q_heads is None or kv_heads is None:
                raise node.error("3-d inputs need the q_num_heads and kv_num_heads attributes")
            batch, q_seq = q.dims()[:2]
            q, k, v = _heads(q, int(q_heads)), _heads(k, int(kv_heads)), _heads(v, int(kv_heads))
        if past_k is not None and past_v is not None:
            k, v = Tensor.cat([past_k, k], 2), Tensor.cat([past_v, v], 2)
        present_k, present_v = k, v
        q_len, kv_len, size = q.dims()[2], k.dims()[2], q.dims()[3]
        root = math.sqrt(float(scale_attr) if scale_attr is not None else 1.0 / math.sqrt(size))
        if q.dims()[1] != k.dims()[1]:  # grouped heads: each key/value head serves a group of queries
            reps = q.dims()[1] // k.dims()[1]
            k, v = _repeat_heads(k, reps), _repeat_heads(v, reps)
        scores = (q * root).matmul((k * root).permute([0, 1, 3, 2]))
        if softcap > 0:
            scores = (scores / softcap).tanh() * softcap
        lengths = None if nonpad is None or past_k is not None else np.asarray(nonpad).reshape(-1)
        offset = past_k.dims()[2] if past_k is not None else 0 if lengths is None else lengths - q_len
        host = _host_bias(q_len, kv_len, causal, window, offset, lengths)
        bias = None if host is None else Tensor.from_data(host.astype(q.dtype.np), device=q.device)
        if mask is not None:
            short = kv_len - mask.dims()[-1]
            if mask.dtype.value == "bool":
                if short > 0:
                    mask = mask.pad([0, short], False)
                mask = mask.zeros_like().cast(q.dtype).mask_fill(mask.bool_not(), float("-inf"))
            elif short > 0:
                mask = mask.pad([0, short], float("-inf"))
            bias = mask.cast(q.dtype) if bias is None else bias + mask.cast(q.dtype)
        logits = scores if bias is None else scores + bias
        shown = logits if mode == 2 else scores
        masked_rows = None
        if bias is not None:
            peak = bias.max_dim(bias.rank - 1)
            masked_rows = peak.is_inf().bool_and(peak.lower_elem(0))
            logits = logits.mask_fill(masked_rows, 0.0)  # a fully masked row: no NaN, zeroed below
        if precision is not None:
            logits = logits.cast(ember_dtype(int(precision), node.label))
        probs = logits.softmax(logits.rank - 1).cast(q.dtype)
        if masked_rows is not None:
            probs = probs.mask_fill(masked_rows, 0.0)
        if mode == 3:
            shown = probs
        y = probs.matmul(v)
        if three:
            y = y.permute([0, 2, 1, 3]).reshape([batch, q_seq, -1])
        out = [y, present_k, present_v, shown][:wanted]
        return out[0] if wanted == 1 else tuple(out)

    return run


@op("RotaryEmbedding", since=23)
def rotary_embedding(node: Node) -> Callable[..., Any]:
    """Rotary position embedding (opset 23) of 4-d ``[batch, heads, seq, head_size]`` or 3-d
    ``[batch, seq, heads * head_size]`` inputs: halves (or, ``interleaved``, even and odd
    positions) of the first ``rotary_embedding_dim`` features rotated by the cached cos and
    sin, read at ``position_ids`` when given."""
    interleaved = bool(node.attr("interleaved", 0))
    heads = int(node.attr("num_heads", 0))
    dim = int(node.attr("rotary_embedding_dim", 0))

    def run(x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None) -> Tensor:
        shape = x.dims()
        if x.rank == 4:
            x = x.permute([0, 2, 1, 3])
        else:
            if not heads:
                raise node.error("a 3-d input needs the num_heads attribute")
            x = x.reshape([shape[0], shape[1], heads, shape[2] // heads])
        b, s, h, size = x.dims()
        r = dim or size
        half = r // 2
        if positions is not None:
            cos, sin = cos.take(0, positions), sin.take(0, positions)
        cos, sin = cos.unsqueeze_dim(2), sin.unsqueeze_dim(2)
        rot = x.narrow(3, 0, r)
        if interleaved:
            pairs = rot.reshape([b, s, h, half, 2])
            x1, x2 = pairs.narrow(4, 0, 1).squeeze_dim(4), pairs.narrow(4, 1, 1).squeeze_dim(4)
        else:
            x1, x2 = rot.narrow(3, 0, half), rot.narrow(3, half, half)
        real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
        if interleaved:
            rot = Tensor.stack([real, imag], 4).reshape([b, s, h, r])
        else:
            rot = Tensor.cat([real, imag], 3)
        out = rot if r == size else Tensor.cat([rot, x.narrow(3, r, size - r)], 3)
        return out.permute([0, 2, 1, 3]) if len(shape) == 4 else out.reshape(shape)

    return run
