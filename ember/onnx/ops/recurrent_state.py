"""The stateful operators of recurrent language models (opset 27): CausalConvWithState
(Mamba's and Gated DeltaNet's causal depthwise convolution with a carried state) and
LinearAttention (linear, gated, delta and gated-delta recurrences with grouped heads).

Both run on ember's tensor ops, so they differentiate on an autodiff device and fuse.
LinearAttention runs its recurrence one token at a time, in float32 whatever the input
type (as ONNX's reference), and returns the state in the past state's type (the query's
without one); ``chunk_size`` is a tuning hint of chunk-parallel kernels with no effect on
the values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ember.backend.dtype import DType
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor
from ember.tensor import layer_ops as M
from ember.tensor.activation import silu


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@op("CausalConvWithState", since=27)
def causal_conv_with_state(node: Node) -> Callable[..., Any]:
    activation = _text(node.attr("activation", "none"))
    if activation not in ("none", "silu", "swish"):
        raise node.attr_error("activation", "must be 'none', 'silu' or 'swish'")

    def run(x: Tensor, weight: Tensor, bias: Tensor | None = None, past: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if x.rank != 3 or weight.rank != 3 or weight.dims()[1] != 1 or weight.dims()[0] != x.dims()[1]:
            raise node.error(
                f"input {x.dims()} must be [batch, channels, length] and weight {weight.dims()} [channels, 1, k]"
            )
        batch, channels, _ = x.dims()
        k = weight.dims()[2]
        if past is None:
            past = Tensor.zeros([batch, channels, k - 1], dtype=x.dtype, device=x.device)
        elif past.dims() != [batch, channels, k - 1]:
            raise node.error(f"past_state {past.dims()} must be [batch, channels, k - 1] = {[batch, channels, k - 1]}")
        padded = Tensor.cat([past.cast(x.dtype), x], 2) if k > 1 else x
        out = M.conv1d(padded, weight.cast(x.dtype), None if bias is None else bias.cast(x.dtype), groups=channels)
        if activation != "none":
            out = silu(out.cast(DType.FLOAT32)).cast(x.dtype)
        length = padded.dims()[2]
        return out, padded.narrow(2, length - (k - 1), k - 1)

    return run


_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(x: Tensor, heads: int) -> Tensor:
    """``[B, T, H * D]`` -> ``[B, H, T, D]``."""
    b, t, hd = x.dims()
    return x.reshape([b, t, heads, hd // heads]).permute([0, 2, 1, 3])


@op("LinearAttention", since=27)
def linear_attention(node: Node) -> Callable[..., Any]:
    rule = _text(node.attr("update_rule", "gated_delta"))
    if rule not in _RULES:
        raise node.attr_error("update_rule", f"must be one of {', '.join(_RULES)}")
    q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
    if q_heads is None or kv_heads is None:
        raise node.error("q_num_heads and kv_num_heads are required")
    q_heads, kv_heads = int(q_heads), int(kv_heads)
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise node.attr_error("q_num_heads", f"must be a positive multiple of kv_num_heads={kv_heads}")
    node.attr("chunk_size")  # a tuning hint: the values do not depend on it
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated != node.has(4):
        raise node.error(f"update_rule {rule!r} {'needs' if gated else 'takes no'} decay input")
    if delta != node.has(5):
        raise node.error(f"update_rule {rule!r} {'needs' if delta else 'takes no'} beta input")
    group = q_heads // kv_heads

    def run(
        query: Tensor,
        key: Tensor,
        value: Tensor,
        past: Tensor | None = None,
        decay: Tensor | None = None,
        beta: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        if query.rank != 3 or key.rank != 3 or value.rank != 3:
            raise node.error(f"query {query.dims()}, key {key.dims()} and value {value.dims()} must be [B, T, H * D]")
        b, t, _ = query.dims()
        d_k, d_v = query.dims()[2] // q_heads, value.dims()[2] // kv_heads
        f32 = DType.FLOAT32
        q = _heads(query.cast(f32), q_heads)
        k = _heads(key.cast(f32), kv_heads)
        v = _heads(value.cast(f32), kv_heads)
        g = None
        if decay is not None:
            last = decay.dims()[-1]
            if decay.rank != 3 or last not in (kv_heads, kv_heads * d_k):
                raise node.error(f"decay {decay.dims()} must be [B, T, kv_num_heads] or [B, T, kv_num_heads * d_k]")
            g = _heads(decay.cast(f32), kv_heads).exp()  # [B, H_kv, T, 1 or d_k]
        rate = None
        if beta is not None:
            if beta.rank != 3 or beta.dims()[-1] not in (kv_heads, 1):
                raise node.error(f"beta {beta.dims()} must be [B, T, kv_num_heads] or [B, T, 1]")
            rate = _heads(beta.cast(f32), beta.dims()[-1])  # [B, H_kv or 1, T, 1]
        want = [b, kv_heads, d_k, d_v]
        if past is not None and past.dims() != want:
            raise node.error(f"past_state {past.dims()} must be [B, kv_num_heads, d_k, d_v] = {want}")
        state = past.cast(f32) if past is not None else Tensor.zeros(want, dtype=f32, device=query.device)
        scale = scale_attr or 1.0 / math.sqrt(d_k)
        outs = []
        for i in range(t):
            q_t = q.narrow(2, i, 1).squeeze_dim(2)  # [B, H_q, d_k]
            k_t = k.narrow(2, i, 1).squeeze_dim(2)  # [B, H_kv, d_k]
            v_t = v.narrow(2, i, 1).squeeze_dim(2)  # [B, H_kv, d_v]
            if g is not None:
                state = state * g.narrow(2, i, 1).squeeze_dim(2).unsqueeze_dim(3)
            if rate is not None:
                retrieved = k_t.unsqueeze_dim(2).matmul(state).squeeze_dim(2)  # S^T k: [B, H_kv, d_v]
                v_t = rate.narrow(2, i, 1).squeeze_dim(2) * (v_t - retrieved)
            state = state + k_t.unsqueeze_dim(3) * v_t.unsqueeze_dim(2)
            read = state.repeat_interleave(group, 1) if group > 1 else state
            outs.append(q_t.unsqueeze_dim(2).matmul(read).squeeze_dim(2) * scale)  # [B, H_q, d_v]
        out = Tensor.stack(outs, 1).reshape([b, t, q_heads * d_v])
        return out.cast(query.dtype), state.cast(past.dtype if past is not None else query.dtype)

    return run
