"""Imported ONNX models against the same models written in ember, and against torch.

    python benchmarks/onnx_import.py

Rows (alternating rounds, medians; torch single-threaded as ember):
- the seed MLP (4-16-1), forward of 64 rows: the per-call cost of running a graph;
- W3's small CNN, a training step (forward, backward, Adam) on 64 images of 1x28x28;
- a transformer encoder layer (d_model 64, 4 heads, batch 8 x 32 tokens), forward: the
  import with static shapes (shape arithmetic folded at load), with a dynamic batch
  (shape arithmetic on the host, kept per input shape), and torch.

Needs torch and onnx (the models are exported with torch.onnx.export).
"""

from __future__ import annotations

import io
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ember.onnx
from benchmarks.common import alternating_us, fmt, print_table, try_import_torch
from ember import Device, Module, Tensor
from ember.nn import Conv2dConfig, Linear, LinearConfig, MaxPool2dConfig, Relu
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamConfig, GradientsParams


def export(torch, net, args, dynamic=None) -> bytes:
    buffer = io.BytesIO()
    options = {"input_names": ["x"], "output_names": ["y"], "opset_version": 17}
    if dynamic:
        options["dynamic_axes"] = {"x": {0: "batch"}, "y": {0: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), args, buffer, dynamo=False, **options)
    return buffer.getvalue()


def ember_train_step(model, x, y):
    optim, loss_fn, state = AdamConfig().init(), CrossEntropyLoss(), {"model": model}

    def step():
        m = state["model"]
        loss = loss_fn.forward(m(x), y)
        loss.into_scalar()
        state["model"] = optim.step(1e-3, m, GradientsParams.from_grads(loss.backward(), m))

    return step


def torch_train_step(torch, net, x, y):
    params = list(net.parameters())
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]

    def step():  # Adam written out (torch.optim would import torch's compiler)
        for p in params:
            p.grad = None
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.item()
        loss.backward()
        with torch.no_grad():
            for p, (m, v) in zip(params, moments):
                m.mul_(0.9).add_(p.grad, alpha=0.1)
                v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                p.sub_(1e-3 * m / (v.sqrt() + 1e-5))

    return step


class Seed(Module):
    l1: Linear
    act: Relu
    l2: Linear

    def forward(self, x):
        return self.l2(self.act(self.l1(x)))


class Cnn(Module):
    conv1: Module
    conv2: Module
    pool: Module
    head: Linear

    def forward(self, x):
        x = self.pool(Relu()(self.conv1(x)))
        x = self.pool(Relu()(self.conv2(x)))
        return self.head(x.flatten(1))


def main() -> None:
    torch = try_import_torch()
    if torch is None:
        sys.exit("benchmarks/onnx_import.py exports its models with torch: pip install torch onnx")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    rows = []

    # The seed MLP: the cost per forward of the step list against a hand-written module.
    device = Device.flex()
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    x_np = rng.standard_normal((64, 4)).astype(np.float32)
    imported = ember.onnx.load(export(torch, net, (torch.from_numpy(x_np),)), device)
    native = Seed(l1=LinearConfig(4, 16).init(device), act=Relu(), l2=LinearConfig(16, 1).init(device))
    x = Tensor.from_data(x_np, device=device)
    xt = torch.from_numpy(x_np)
    with torch.no_grad():
        medians, ratios = alternating_us(
            {"native": lambda: native(x), "onnx": lambda: imported(x), "torch": lambda: net(xt)}
        )
    rows.append(
        [
            "seed MLP forward, 64",
            fmt(medians["native"]),
            fmt(medians["onnx"]),
            fmt(medians["torch"]),
            f"{ratios[('onnx', 'native')]:.2f}x",
            f"{ratios[('onnx', 'torch')]:.2f}x",
        ]
    )

    # W3: a training step of the small CNN.
    device = Device.flex().autodiff()
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(1568, 10),
    )
    x_np = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
    y_np = rng.integers(0, 10, 64)
    imported = ember.onnx.load(export(torch, net, (torch.from_numpy(x_np),)), device)
    native = Cnn(
        conv1=Conv2dConfig((1, 16), (3, 3), padding=(1, 1)).init(device),
        conv2=Conv2dConfig((16, 32), (3, 3), padding=(1, 1)).init(device),
        pool=MaxPool2dConfig((2, 2)).init(),
        head=LinearConfig(1568, 10).init(device),
    )
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    xt, yt = torch.from_numpy(x_np), torch.from_numpy(y_np)
    medians, ratios = alternating_us(
        {
            "native": ember_train_step(native, x, y),
            "onnx": ember_train_step(imported, x, y),
            "torch": torch_train_step(torch, net.train(), xt, yt),
        },
        repeats=5,
        min_time=0.2,
    )
    rows.append(
        [
            "W3 CNN train step, 64",
            fmt(medians["native"]),
            fmt(medians["onnx"]),
            fmt(medians["torch"]),
            f"{ratios[('onnx', 'native')]:.2f}x",
            f"{ratios[('onnx', 'torch')]:.2f}x",
        ]
    )

    # A transformer encoder layer, forward.
    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)

        def forward(self, x):
            return self.layer(x)

    net = Encoder().eval()
    x_np = rng.standard_normal((8, 32, 64)).astype(np.float32)
    xt = torch.from_numpy(x_np)
    device = Device.flex()
    static = ember.onnx.load(export(torch, net, (xt,)), device)
    dynamic = ember.onnx.load(export(torch, net, (xt,), dynamic=True), device)
    x = Tensor.from_data(x_np, device=device)
    torch.backends.mha.set_fastpath_enabled(False)  # the same math as the export
    with torch.no_grad():
        medians, ratios = alternating_us(
            {"static": lambda: static(x), "dynamic": lambda: dynamic(x), "torch": lambda: net(xt)}
        )
    rows.append(
        [
            "encoder layer forward, 8x32x64 (static)",
            "-",
            fmt(medians["static"]),
            fmt(medians["torch"]),
            "-",
            f"{ratios[('static', 'torch')]:.2f}x",
        ]
    )
    rows.append(
        [
            "encoder layer forward, 8x32x64 (dynamic batch)",
            "-",
            fmt(medians["dynamic"]),
            fmt(medians["torch"]),
            "-",
            f"{ratios[('dynamic', 'torch')]:.2f}x",
        ]
    )
    print_table(
        "ONNX imports (us per call, medians of alternating rounds)",
        ["workload", "ember native", "ember onnx", "torch", "onnx/native", "onnx/torch"],
        rows,
    )


if __name__ == "__main__":
    main()
