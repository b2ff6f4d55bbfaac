"""Forward + backward of the seed's MLP (64x4 -> 16 -> 1, MSE) on flex against
PyTorch eager, in one run; and a double backward (the gradient of a gradient-norm
penalty, ``backward(create_graph=True)`` then ``backward()``) against
``torch.autograd.grad(..., create_graph=True)``.

    python benchmarks/autodiff.py

Target (issue "Autodiff"): ember/flex at most 0.5x torch eager's time.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import fmt, median_us, paired_us, print_table, try_import_torch
from ember import Device, Tensor
from ember.nn import LinearConfig, Relu
from ember.nn.loss import MseLoss, Reduction


def main() -> None:
    rng = np.random.default_rng(0)
    x_np = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
    y_np = (x_np @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.5).astype(np.float32)

    device = Device.flex().autodiff()
    l1, act, l2 = LinearConfig(4, 16).init(device), Relu(), LinearConfig(16, 1).init(device)
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    mse = MseLoss()

    def ember_step():
        loss = mse.forward(l2(act(l1(x))), y, Reduction.MEAN)
        return loss.backward()

    def ember_forward():
        return mse.forward(l2(act(l1(x))), y, Reduction.MEAN)

    params = [l1.weight.val(), l1.bias.val(), l2.weight.val(), l2.bias.val()]

    def ember_double():
        loss = mse.forward(l2(act(l1(x))), y, Reduction.MEAN)
        grads = loss.backward(create_graph=True)
        penalty = None
        for p in params:
            term = p.grad(grads).square().sum()
            penalty = term if penalty is None else penalty.add(term)
        return penalty.add(loss).backward()

    rows = []
    torch = try_import_torch()
    if torch is not None:
        net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        tx, ty = torch.from_numpy(x_np), torch.from_numpy(y_np)

        def torch_step():
            net.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(net(tx), ty).backward()

        def torch_forward():
            return torch.nn.functional.mse_loss(net(tx), ty)

        def torch_double():
            net.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(net(tx), ty)
            grads = torch.autograd.grad(loss, list(net.parameters()), create_graph=True)
            (sum((g * g).sum() for g in grads) + loss).backward()

        # Alternating rounds, so that drifting machine load hits both alike.
        t_f, tt_f, r_f = paired_us(ember_forward, torch_forward, repeats=9)
        t_fb, tt_fb, r_fb = paired_us(ember_step, torch_step, repeats=9)
        rows.append(["forward (tracked)", fmt(t_f), fmt(tt_f), f"{r_f:.2f}x"])
        rows.append(["forward + backward", fmt(t_fb), fmt(tt_fb), f"{r_fb:.2f}x"])
        t_dd, tt_dd, r_dd = paired_us(ember_double, torch_double, repeats=9)
        rows.append(["double backward (grad-norm penalty)", fmt(t_dd), fmt(tt_dd), f"{r_dd:.2f}x"])
    else:
        rows.append(["forward (tracked)", fmt(median_us(ember_forward, repeats=9)), "-", "-"])
        rows.append(["forward + backward", fmt(median_us(ember_step, repeats=9)), "-", "-"])
        rows.append(["double backward (grad-norm penalty)", fmt(median_us(ember_double, repeats=9)), "-", "-"])
    print_table(
        "seed MLP 64x4 -> 16 -> 1, MSE: ember/flex+autodiff vs torch eager (median us per call; ratio: median of alternating rounds)",
        ["workload", "ember", "torch", "ember/torch"],
        rows,
    )


if __name__ == "__main__":
    main()
