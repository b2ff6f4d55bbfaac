"""Forward + backward of Conv2d and of a small CNN on flex against PyTorch eager,
in one run (medians of several runs, microseconds).

    python benchmarks/nn.py              # both libraries with their default threads
    python benchmarks/nn.py --threads 1  # both limited to one thread (steadier on a busy machine)

The small CNN: Conv2d(1,16,3,p1)-ReLU-MaxPool2-Conv2d(16,32,3,p1)-ReLU-MaxPool2-
Linear(1568,10) with cross entropy, batch 64 of 1x28x28.
Target (issue 5): the small CNN's forward + backward on flex within 1.5x of torch eager.

The LSTM: 2 layers of hidden 128 over 64 steps of 128 features, batch 32, the sum of the
outputs backward (input and every weight), torch's ``nn.LSTM`` weights loaded into
ember's ``Lstm``. ember runs one op per gate product and step (torch one fused C++ loop).

flex's convolutions are bound by numpy's BLAS (an sgemm per conv direction), while
torch runs oneDNN's direct convolutions; the table header names the BLAS core type
numpy uses (``OPENBLAS_CORETYPE`` pins it, e.g. to AVX2 ``Haswell`` kernels on an
AVX-512 machine). On a machine shared with other work, ``--threads 1`` gives the
steadier comparison: a multi-threaded BLAS waits for descheduled threads.
"""

from __future__ import annotations

import os
import sys

if "--threads" in sys.argv:  # before numpy loads its BLAS
    _THREADS = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _THREADS
else:
    _THREADS = None

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import fmt, median_us, paired_us, print_table, try_import_torch
from ember import Device, Module, Param, Tensor
from ember.module.foreign import load_foreign
from ember.nn import Conv2d, Conv2dConfig, Linear, LinearConfig, LstmConfig, MaxPool2d, MaxPool2dConfig, Relu
from ember.nn.loss import CrossEntropyLossConfig


class SmallCnn(Module):
    conv1: Conv2d
    conv2: Conv2d
    pool: MaxPool2d
    act: Relu
    fc: Linear

    @classmethod
    def new(cls, device: Device) -> SmallCnn:
        return cls(
            conv1=Conv2dConfig((1, 16), 3, padding=1).init(device),
            conv2=Conv2dConfig((16, 32), 3, padding=1).init(device),
            pool=MaxPool2dConfig(2).init(),
            act=Relu(),
            fc=LinearConfig(1568, 10).init(device),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.act(self.conv1(x)))
        x = self.pool(self.act(self.conv2(x)))
        return self.fc(x.reshape([x.dims()[0], -1]))


def _torch_cnn(torch, model: SmallCnn):
    """The same network in torch, with ember's weights (Linear transposed)."""
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
    with torch.no_grad():
        for t_layer, layer in ((net[0], model.conv1), (net[3], model.conv2)):
            t_layer.weight.copy_(torch.from_numpy(layer.weight.val().to_numpy()))
            t_layer.bias.copy_(torch.from_numpy(layer.bias.val().to_numpy()))
        net[7].weight.copy_(torch.from_numpy(model.fc.weight.val().to_numpy().T))
        net[7].bias.copy_(torch.from_numpy(model.fc.bias.val().to_numpy()))
    return net


def _lstm_case(torch, device: Device, rng: np.random.Generator):
    """The 2-layer LSTM's forward + backward, with torch's twin when torch is present."""
    name = "LSTM 2 layers, h128, seq 64, batch 32, fwd+bwd"
    x_np = rng.standard_normal((32, 64, 128)).astype(np.float32)
    lstm = LstmConfig(128, 128, num_layers=2).init(device)
    if torch is not None:
        torch.manual_seed(0)
        t_lstm = torch.nn.LSTM(128, 128, num_layers=2, batch_first=True)
        weights = {k: v.detach().numpy() for k, v in t_lstm.state_dict().items()}
        lstm = load_foreign(lstm, weights, source="torch", op="benchmark")[0]

    def ember_lstm():
        x = Tensor.from_data(x_np, device=device).require_grad()
        return lstm(x)[0].sum().backward()

    if torch is None:
        return name, ember_lstm, None
    tx = torch.from_numpy(x_np)
    check = t_lstm(tx)[0].sum().item()
    assert abs(check - lstm(Tensor.from_data(x_np, device=device))[0].sum().into_scalar()) < 1e-2 * max(1.0, abs(check))

    def torch_lstm():
        t_lstm.zero_grad(set_to_none=True)
        x = tx.clone().requires_grad_()
        t_lstm(x)[0].sum().backward()

    return name, ember_lstm, torch_lstm


def main() -> None:
    rng = np.random.default_rng(0)
    device = Device.flex().autodiff()
    device.seed(0)
    torch = try_import_torch()
    if torch is not None and _THREADS is not None:
        torch.set_num_threads(int(_THREADS))
    rows = []

    # Conv2d alone: the CNN's second convolution, fwd + bwd (input and weight grads).
    x_np = rng.standard_normal((64, 16, 14, 14)).astype(np.float32)
    conv = Conv2dConfig((16, 32), 3, padding=1).init(device)
    conv = Conv2d(weight=Param.from_tensor(conv.weight.val()), bias=Param.from_tensor(conv.bias.val()), padding=1)

    def ember_conv():
        x = Tensor.from_data(x_np, device=device).require_grad()
        return conv(x).sum().backward()

    cases = [("Conv2d 64x16x14x14 -> 32, k3 p1, fwd+bwd", ember_conv, None)]

    images = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, 64)
    model = SmallCnn.new(device)
    ce = CrossEntropyLossConfig().init()
    xi, yi = Tensor.from_data(images, device=device), Tensor.from_data(labels, device=device)

    def ember_cnn():
        return ce(model(xi), yi).backward()

    evaluated = model.valid()  # the same weights on the plain device: no graph is recorded
    xe, ye = xi.to_device(device.inner()), yi.to_device(device.inner())

    def ember_cnn_forward():
        return ce(evaluated(xe), ye)

    cases.append(("small CNN, batch 64, fwd+bwd", ember_cnn, None))
    cases.append(("small CNN, batch 64, forward (inference)", ember_cnn_forward, None))

    if torch is not None:
        t_conv = torch.nn.Conv2d(16, 32, 3, padding=1)
        tx = torch.from_numpy(x_np)

        def torch_conv():
            t_conv.zero_grad(set_to_none=True)
            x = tx.clone().requires_grad_()
            t_conv(x).sum().backward()

        net = _torch_cnn(torch, model)
        timages, tlabels = torch.from_numpy(images), torch.from_numpy(labels)
        check = torch.nn.functional.cross_entropy(net(timages), tlabels).item()
        assert abs(check - ce(model(xi), yi).into_scalar()) < 1e-3, "the two CNNs disagree"

        def torch_cnn():
            net.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(net(timages), tlabels).backward()

        def torch_cnn_forward():
            with torch.no_grad():
                return torch.nn.functional.cross_entropy(net(timages), tlabels)

        cases = [
            (cases[0][0], ember_conv, torch_conv),
            (cases[1][0], ember_cnn, torch_cnn),
            (cases[2][0], ember_cnn_forward, torch_cnn_forward),
        ]

    cases.append(_lstm_case(torch, device, rng))

    for name, ember_fn, torch_fn in cases:
        if torch_fn is None:
            rows.append([name, fmt(median_us(ember_fn, repeats=9, min_time=0.2)), "-", "-"])
            continue
        # Alternating rounds: drifting load on a shared machine hits both alike.
        t_ember, t_torch, ratio = paired_us(ember_fn, torch_fn, repeats=9, min_time=0.2)
        rows.append([name, fmt(t_ember), fmt(t_torch), f"{ratio:.2f}x"])
    threads = "-" if torch is None else str(torch.get_num_threads())
    blas = os.environ.get("OPENBLAS_CORETYPE", "auto-detected")
    print_table(
        f"ember/flex vs torch eager (median us per call, median ratio of alternating rounds; torch threads: {threads}; BLAS threads: "
        f"{_THREADS or 'default'}, OpenBLAS core type: {blas}; target: small CNN fwd+bwd <= 1.5x)",
        ["case", "ember", "torch", "ember/torch"],
        rows,
    )


if __name__ == "__main__":
    main()
