"""Custom gradients on flex: forward + backward of a hand-written ``Function``
(``x / (1 + |x|)`` with its derivative, on a 64x256 float32 tensor) and of the same
op with a gradient hook, against the op written with built-in ops (the cost of the
custom node) and against ``torch.autograd.Function`` / ``Tensor.register_hook`` in the
same run (alternating rounds, medians).

    OPENBLAS_NUM_THREADS=1 python benchmarks/custom_grad.py
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import alternating_us, fmt, print_table, try_import_torch
from ember import Device, Tensor
from ember.autograd import Function


class SoftClip(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.div(x.abs().add_scalar(1.0))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        d = x.abs().add_scalar(1.0)
        return g.div(d.mul(d))


def main() -> None:
    data = np.random.default_rng(0).uniform(-2.0, 2.0, (64, 256)).astype(np.float32)
    x = Tensor.from_data(data, device=Device.flex().autodiff()).require_grad()

    def builtin():
        return x.div(x.abs().add_scalar(1.0)).sum().backward()

    def custom():
        return SoftClip.apply(x).sum().backward()

    def hooked():
        y = SoftClip.apply(x)
        y.register_hook(lambda g: g.clamp(-0.5, 0.5))
        return y.sum().backward()

    fns = {"builtin": builtin, "custom": custom, "hooked": hooked}
    torch = try_import_torch()
    if torch is not None:

        class TSoftClip(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x / (x.abs() + 1.0)

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                d = x.abs() + 1.0
                return g / (d * d)

        tx = torch.from_numpy(data).requires_grad_()

        def t_custom():
            tx.grad = None
            TSoftClip.apply(tx).sum().backward()

        def t_hooked():
            tx.grad = None
            y = TSoftClip.apply(tx)
            y.register_hook(lambda g: g.clamp(-0.5, 0.5))
            y.sum().backward()

        fns.update({"torch custom": t_custom, "torch hooked": t_hooked})
    medians, ratios = alternating_us(fns, repeats=9)
    rows = [["built-in ops (reference)", fmt(medians["builtin"]), "-", "-", "-"]]
    for name in ("custom", "hooked"):
        torch_name = f"torch {name}"
        rows.append(
            [
                f"Function{' + register_hook' if name == 'hooked' else ''}",
                fmt(medians[name]),
                f"{ratios[(name, 'builtin')]:.2f}x",
                fmt(medians.get(torch_name)),
                f"{ratios[(name, torch_name)]:.2f}x" if torch_name in medians else "-",
            ]
        )
    print_table(
        "x / (1 + |x|), 64x256 float32, forward + backward on flex+autodiff (median us per call; ratios: "
        "median of alternating rounds)",
        ["workload", "ember", "ember/built-in", "torch", "ember/torch"],
        rows,
    )


if __name__ == "__main__":
    main()
