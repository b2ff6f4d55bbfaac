"""The seed's program: one training step, from ``forward`` to ``optim.step``,
repeated on each device (docs/design.md), then the same step compiled with
``ember.compile`` (traced once, replayed without Python per op).
Run: ``python examples/one_step.py [steps]``."""

from __future__ import annotations

import sys
import time

import ember
from ember import Device, DeviceKind, Distribution, Module, Tensor
from ember.errors import BackendUnavailableError
from ember.nn import Linear, LinearConfig, Relu
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams


class Mlp(Module):
    l1: Linear
    act: Relu
    l2: Linear

    @classmethod
    def new(cls, device: Device) -> Mlp:
        return cls(l1=LinearConfig(4, 16).init(device), act=Relu(), l2=LinearConfig(16, 1).init(device))

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.act(self.l1(x)))


def format_duration(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.6f}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.6f}ms"
    return f"{seconds * 1e6:.3f}µs"


def problem(device: Device) -> tuple[Tensor, Tensor]:
    """Synthetic regression data: y = x · w + 0.5, 64 samples of 4 features."""
    device.seed(42)
    x = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=device)
    w = Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)
    return x, x.matmul(w).add_scalar(0.5)


def train(label: str, device: Device, steps: int) -> list[float]:
    x, y = problem(device)
    model, optim = Mlp.new(device), AdamConfig().init()
    print(f"{label}: device = {device!r}, params = {model.num_params()}")
    losses = []
    t0 = t_step = time.perf_counter()
    for step in range(steps):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        loss_value = loss.into_scalar()  # one sync point per step
        grads = GradientsParams.from_grads(loss.backward(), model)
        n_grads = len(grads)
        model = optim.step(1e-2, model, grads)  # a new model, same ParamIds
        now = time.perf_counter()
        dt, t_step = now - t_step, now
        losses.append(loss_value)
        if step < 5 or step % 50 == 49:
            print(f"  step {step:3}  loss {loss_value:.6f}  grads {n_grads}  {format_duration(dt)}")
    device.sync()
    print(f"  {steps} steps in {format_duration(time.perf_counter() - t0)}")
    return losses


def train_compiled(label: str, device: Device, steps: int) -> list[float]:
    """The same loop with the step compiled: the first call traces forward, backward
    and the Adam update into one graph; later calls replay it."""
    x, y = problem(device)
    model, optim = Mlp.new(device), AdamConfig().init()
    print(f"{label}: device = {device!r}, params = {model.num_params()}")

    @ember.compile
    def train_step(model: Mlp, x: Tensor, y: Tensor) -> tuple[Mlp, Tensor]:
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        grads = GradientsParams.from_grads(loss.backward(), model)
        return optim.step(1e-2, model, grads), loss

    losses = []
    t0 = t_step = time.perf_counter()
    for step in range(steps):
        model, loss = train_step(model, x, y)  # the model is updated in place (donated)
        loss_value = loss.into_scalar()
        now = time.perf_counter()
        dt, t_step = now - t_step, now
        losses.append(loss_value)
        if step < 5 or step % 50 == 49:
            print(f"  step {step:3}  loss {loss_value:.6f}  compiled  {format_duration(dt)}")
    print(f"  {steps} steps in {format_duration(time.perf_counter() - t0)} ({train_step.stats['traces']} traces)")
    return losses


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    train("flex", Device.flex().autodiff(), steps)
    train_compiled("flex, compiled", Device.flex().autodiff(), steps)
    try:
        gpu = Device.wgpu(DeviceKind.DEFAULT).autodiff()
    except BackendUnavailableError as error:
        print(f"wgpu: skipped ({error})")
        return
    train("wgpu", gpu, steps)


if __name__ == "__main__":
    main()
