"""Scaled dot-product attention on flex: the fused kernel against the composite it
replaces (the same ops one by one), and PyTorch eager, forward and forward +
backward, in alternating rounds (medians, microseconds).

    python benchmarks/attention.py
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import fmt, median_us, paired_us, print_table, try_import_torch
from ember import Device, Tensor
from ember.backend.flex.backend import FlexBackend
from ember.tensor.attention import scaled_dot_product_attention

SHAPES = [(8, 4, 64, 32), (4, 8, 128, 64), (1, 4, 256, 64)]


def _composite(fn):
    """Run ``fn`` with flex's fused attention switched off."""

    def run():
        saved = FlexBackend.attention
        FlexBackend.attention = lambda self, *args: NotImplemented
        try:
            return fn()
        finally:
            FlexBackend.attention = saved

    return run


def main() -> None:
    torch = try_import_torch()
    if torch is not None:
        torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    rows = []
    for batch, heads, seq, dim in SHAPES:
        arrays = [rng.standard_normal((batch, heads, seq, dim)).astype(np.float32) for _ in range(3)]
        for label, device in (("forward", Device.flex()), ("forward+backward", Device.flex().autodiff())):
            tensors = [Tensor.from_data(a, device=device) for a in arrays]
            if device.is_autodiff():
                tensors = [t.require_grad() for t in tensors]

            def step(tensors=tensors, device=device):
                out = scaled_dot_product_attention(*tensors, is_causal=True)
                if device.is_autodiff():
                    out.sum().backward()
                else:
                    out.to_numpy()

            fused, composite, ratio = paired_us(step, _composite(step))
            theirs = None
            backward = device.is_autodiff()
            if torch is not None:
                tt = [torch.from_numpy(a).requires_grad_(backward) for a in arrays]

                def torch_step(tt=tt, backward=backward):
                    out = torch.nn.functional.scaled_dot_product_attention(*tt, is_causal=True)
                    if backward:
                        out.sum().backward()

                theirs = median_us(torch_step)
            rows.append(
                [
                    f"{batch}x{heads}x{seq}x{dim}",
                    label,
                    fmt(fused),
                    fmt(composite),
                    f"{1 / ratio:.2f}x",
                    fmt(theirs),
                    "-" if theirs is None else f"{fused / theirs:.2f}x",
                ]
            )
    print_table(
        "scaled_dot_product_attention on flex, causal (us per call; speedup = composite / fused)",
        ["shape [B,H,L,E]", "pass", "fused", "composite", "speedup", "torch", "fused/torch"],
        rows,
    )


if __name__ == "__main__":
    main()
