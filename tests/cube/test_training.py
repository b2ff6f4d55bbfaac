"""docs/design.md's program on the GPU: autodiff wraps cube unchanged, the loss falls,
and the same seed repeats bit for bit."""

from __future__ import annotations

from ember import Distribution, Tensor
from ember.nn import LinearConfig, Relu
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams
from tests.shared_models import Mlp


def train(device, steps: int) -> list[float]:
    device.seed(42)
    x = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=device)
    w = Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)
    y = x.matmul(w).add_scalar(0.5)
    model = Mlp(l1=LinearConfig(4, 16).init(device), act=Relu(), l2=LinearConfig(16, 1).init(device))
    optim = AdamConfig().init()
    losses = []
    for _ in range(steps):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        losses.append(loss.into_scalar())
        grads = GradientsParams.from_grads(loss.backward(), model)
        assert len(grads) == 4
        model = optim.step(1e-2, model, grads)
    device.sync()
    return losses


def test_seed_program_learns_and_repeats_on_the_gpu(gpu):
    device = gpu.autodiff()
    first = train(device, 120)
    assert first[-1] < 0.05 * first[0]
    assert train(device, 120) == first


def test_gradients_match_flex(gpu):
    import numpy as np

    from ember import Device
    from ember.tensor import activation as A
    from tests.conftest import assert_close

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    results = []
    for device in (Device.flex().autodiff(), gpu.autodiff()):
        tx = Tensor.from_data(x, device=device).require_grad()
        tw = Tensor.from_data(w, device=device).require_grad()
        out = A.log_softmax(tx.matmul(tw).tanh(), 1).mul(tx.slice([None, (0, 3)]).exp()).sum()
        grads = out.backward()
        results.append((tx.grad(grads).to_numpy(), tw.grad(grads).to_numpy()))
    for ours, ref in zip(results[1], results[0]):
        assert_close(ours, ref, rtol=1e-4, atol=1e-5)
