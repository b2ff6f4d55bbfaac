"""The cuda backend on a real NVIDIA GPU: skipped where there is none (CI has none;
``scripts/gpu_check_cuda.sh`` runs these with the conformance suite on a GPU machine).
The conformance suite itself runs on cuda through the ``device`` fixture
(``tests/conftest.py``: ``cuda``, ``cuda+autodiff``)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Tensor
from ember.errors import DeviceMemoryError
from tests.conftest import assert_close
from tests.shared_models import Mlp


@pytest.fixture
def cuda():
    try:
        return Device.cuda()
    except Exception as error:
        pytest.skip(f"no CUDA device: {error}")


def test_repr_and_stacking(cuda):
    assert repr(cuda) == "Device<Cube(Cuda(CudaDevice { index: 0 }))>"
    assert (
        repr(cuda.autodiff())
        == "Device<Autodiff { device: Cube(Cuda(CudaDevice { index: 0 })), checkpointing: Disabled }>"
    )
    assert repr(cuda.fusion()) == "Device<Fusion { device: Cube(Cuda(CudaDevice { index: 0 })) }>"
    assert Device.parse("cuda:0+autodiff") is cuda.autodiff()
    assert Device.parse(cuda.autodiff().spec()) is cuda.autodiff()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "float64"])
@pytest.mark.parametrize(
    "dist",
    [
        Distribution.uniform(-2.0, 3.0),
        Distribution.normal(1.0, 2.0),
        Distribution.bernoulli(0.3),
        Distribution.default(),
    ],
)
def test_philox_draws_match_flex(cuda, dtype, dist):
    if dtype == "int32" and dist.kind == "normal":
        return
    flex = Device.flex()
    flex.seed(11)
    cuda.seed(11)
    a = Tensor.random([1001], dist, device=flex, dtype=dtype).to_numpy()
    b = Tensor.random([1001], dist, device=cuda, dtype=dtype).to_numpy()
    if dtype == "float64":  # numpy's and CUDA's float64 log/cos differ in the last bits
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(b.view(np.uint8), a.view(np.uint8))


def test_to_device_round_trips(cuda, rng):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    t = Tensor.from_data(x, device=Device.flex()).to_device(cuda)
    assert t.device == cuda
    back = t.mul_scalar(2.0).to_device(Device.flex())
    np.testing.assert_array_equal(back.to_numpy(), x * 2)
    try:
        wgpu = Device.wgpu()
        wgpu.backend.ensure_ready()
    except Exception:
        return
    np.testing.assert_array_equal(t.to_device(wgpu).to_device(cuda).to_numpy(), x)


def test_memory_stats_empty_cache_and_oom(cuda):
    backend = cuda.backend
    t = Tensor.zeros([1024, 1024], device=cuda)
    cuda.sync()
    stats = backend.memory_stats()
    assert stats["allocated"] >= 4 * 1024 * 1024 and stats["reserved"] >= stats["allocated"]
    del t
    backend.empty_cache()
    with pytest.raises(DeviceMemoryError, match=r"MiB.*free"):
        Tensor.zeros([1 << 22, 1 << 22], device=cuda)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16", "int64"])
def test_matmul_against_numpy(cuda, rng, dtype):
    a = rng.standard_normal((3, 33, 17)).astype(np.float32)
    b = rng.standard_normal((17, 9)).astype(np.float32)
    if dtype == "int64":
        a, b = np.round(a * 3), np.round(b * 3)
    ta = Tensor.from_data(a, device=cuda).cast(dtype)
    tb = Tensor.from_data(b, device=cuda).cast(dtype)
    out = ta.matmul(tb).cast("float64").to_numpy()
    tol = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 3e-2, "float16": 3e-3, "int64": 0}[dtype]
    ref = ta.cast("float64").to_numpy() @ tb.cast("float64").to_numpy()
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * 10)


def _mlp_step(device):
    from ember.nn.loss import MseLoss, Reduction
    from ember.optim import AdamConfig, GradientsParams

    device.seed(42)
    x = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)).add_scalar(0.5)
    model = Mlp.new(device)
    optim = AdamConfig().init()

    def step(model, x, y):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        return optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model)), loss

    return model, x, y, step


def test_seed_program_matches_flex(cuda):
    losses = {}
    for name, device in (("flex", Device.flex().autodiff()), ("cuda", cuda.autodiff())):
        model, x, y, step = _mlp_step(device)
        out = []
        for _ in range(30):
            model, loss = step(model, x, y)
            out.append(loss.into_scalar())
        losses[name] = out
    np.testing.assert_allclose(losses["cuda"], losses["flex"], rtol=2e-4, atol=1e-6)


@pytest.mark.parametrize("fuse", [False, True])
def test_compiled_step_replays_as_a_cuda_graph(cuda, fuse):
    from ember.backend.fusion.cuda.executor import CudaExecutor

    device = cuda.autodiff()
    model, x, y, step = _mlp_step(device)
    eager_model, _, _, eager_step = _mlp_step(device)
    executor = CudaExecutor(fuse=fuse)
    compiled = ember.compile(step, executor=executor)
    for _ in range(6):
        model, loss = compiled(model, x, y)
        eager_model, eager_loss = eager_step(eager_model, x, y)
        assert_close(loss, eager_loss.to_numpy(), rtol=1e-4, atol=1e-6)
    assert executor.stats["captures"] >= 1 and executor.stats["graph_launches"] >= 3
    np.testing.assert_allclose(
        model.l1.weight.val().to_numpy(), eager_model.l1.weight.val().to_numpy(), rtol=1e-4, atol=1e-6
    )


@pytest.mark.parametrize("block", [None, 32])
@pytest.mark.parametrize("value", ["int8", "int4"])
def test_quantized_linear_reads_the_packed_weight(cuda, rng, value, block):
    """The kernel layer's quantized matmul printed as CUDA C, against float64 of the
    dequantized weight (decode and prefill rows)."""
    from ember.quantization import QuantScheme, quantize, quantized_linear

    scheme = QuantScheme.int8(block=block) if value == "int8" else QuantScheme.int4(block=block)
    w = rng.standard_normal((96, 256)).astype(np.float32)
    q = quantize(Tensor.from_data(w), scheme)
    bias = rng.standard_normal(96).astype(np.float32)
    expected_w = q.dequantize().to_numpy().astype(np.float64)
    for m in (1, 40):
        x = rng.standard_normal((m, 256)).astype(np.float32)
        got = quantized_linear(Tensor.from_data(x, device=cuda), q.to_device(cuda), Tensor.from_data(bias, device=cuda))
        assert_close(got, x @ expected_w.T + bias, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("activations", ["dynamic", "static"])
def test_quantized_linear_activation_schemes(cuda, rng, activations):
    """The input rounded to its int8 grid, then the packed weight: against float64 of the
    rounded input times the dequantized weight."""
    from ember.quantization import QuantScheme, quantize, quantized_linear

    q = quantize(
        Tensor.from_data(rng.standard_normal((96, 256)).astype(np.float32)), QuantScheme.int8(activations=activations)
    )
    x = rng.standard_normal((40, 256)).astype(np.float32)
    scale = np.array([0.03], np.float32) if activations == "static" else None
    step = scale[0] if scale is not None else np.abs(x).max(1, keepdims=True) / 127
    xq = np.clip(np.round(x / step), -127, 127) * step
    given = None if scale is None else Tensor.from_data(scale, device=cuda)
    got = quantized_linear(Tensor.from_data(x, device=cuda), q.to_device(cuda), None, given)
    assert_close(got, xq.astype(np.float64) @ q.dequantize().to_numpy().astype(np.float64).T, rtol=1e-5, atol=1e-4)
