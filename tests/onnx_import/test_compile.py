"""``ember.onnx.load(..., compile=True)``: the forward runs through ``ember.compile``
(traced once per input shapes, then replayed) and matches the eager import."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
import ember.onnx
from ember import Device, Tensor
from ember.capture import CompileWarning
from ember.optim import GradientsParams
from tests.onnx_import import models
from tests.onnx_import.helpers import export, onnx_model, run_ort

RTOL = 1e-5


def _pair(data: bytes, device: Device) -> tuple[ember.onnx.OnnxModel, ember.onnx.OnnxModel]:
    return ember.onnx.load(data, device, compile=True), ember.onnx.load(data, device)


def test_cnn_matches_eager_and_replays(torch, rng):
    x = rng.standard_normal((4, 1, 28, 28)).astype(np.float32)
    compiled, eager = _pair(export(torch, models.small_cnn(torch), (torch.from_numpy(x),)), Device.flex())
    xt = Tensor.from_data(x, device=Device.flex())
    want = eager(xt).to_numpy()
    np.testing.assert_allclose(compiled(xt).to_numpy(), want, rtol=RTOL, atol=1e-6)
    assert compiled.stats["traces"] == 1 and compiled.stats["replays"] == 0
    x2 = Tensor.from_data(rng.standard_normal((4, 1, 28, 28)).astype(np.float32), device=Device.flex())
    np.testing.assert_allclose(compiled(x2).to_numpy(), eager(x2).to_numpy(), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(compiled(xt).to_numpy(), want, rtol=RTOL, atol=1e-6)
    assert compiled.stats["traces"] == 1 and compiled.stats["replays"] == 2
    assert eager.stats == {}


def test_cnn_compiles_on_a_fusion_device(torch, rng):
    """On ``Device.flex().fusion()`` the compiled forward is one plan of the LLVM executor
    over flex (its inputs read from the device's lazy tensors, queued ones run first)."""
    from ember.backend.fusion.llvm.executor import LLVMPlan

    x = rng.standard_normal((4, 1, 28, 28)).astype(np.float32)
    data = export(torch, models.small_cnn(torch), (torch.from_numpy(x),))
    fusion = Device.flex().fusion()
    compiled, eager = ember.onnx.load(data, fusion, compile=True), ember.onnx.load(data, Device.flex())
    for scale in (1.0, 2.0, 0.5):
        want = eager(Tensor.from_data(x * scale, device=Device.flex())).to_numpy()
        got = compiled(Tensor.from_data(x, device=fusion).mul_scalar(scale))
        assert got.device == fusion
        np.testing.assert_allclose(got.to_numpy(), want, rtol=RTOL, atol=1e-5)
    assert compiled.stats["traces"] == 1 and compiled.stats["replays"] == 2
    (entry,) = compiled.compiled._entries.values()
    assert isinstance(entry.plan, LLVMPlan)


def test_encoder_matches_eager_per_batch(torch, rng):
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    data = export(torch, models.encoder(torch), (torch.from_numpy(x),), dynamic={"x": {0: "b"}, "y": {0: "b"}})
    compiled, eager = _pair(data, Device.flex())
    for batch in (2, 3, 2):
        xt = Tensor.from_data(rng.standard_normal((batch, 5, 16)).astype(np.float32), device=Device.flex())
        np.testing.assert_allclose(compiled(x=xt).to_numpy(), eager(xt).to_numpy(), rtol=RTOL, atol=1e-5)
    assert compiled.stats["traces"] == 2 and compiled.stats["replays"] == 1


@pytest.mark.parametrize("gemm", ["ember", "blas"])
def test_encoder_products_match_onnxruntime(torch, ort, rng, monkeypatch, gemm):
    """A transformer encoder layer's products (projections, attention, feed-forward)
    compiled through ember's own product or BLAS's, against onnxruntime."""
    from ember.backend.fusion.llvm.sgemm import GEMM_ENV

    monkeypatch.setenv(GEMM_ENV, gemm)
    x = rng.standard_normal((3, 40, 16)).astype(np.float32)
    data = export(torch, models.encoder(torch), (torch.from_numpy(x),))
    compiled = ember.onnx.load(data, Device.flex(), compile=True)
    xt = Tensor.from_data(x, device=Device.flex())
    for _ in range(3):  # trace, compile, replay
        got = compiled(xt).to_numpy()
    (want,) = run_ort(ort, data, x)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-5)
    assert compiled.stats["replays"] >= 1


def test_updated_weights_are_inputs_not_constants(torch, rng):
    x = rng.standard_normal((2, 1, 28, 28)).astype(np.float32)
    compiled, _ = _pair(export(torch, models.small_cnn(torch), (torch.from_numpy(x),)), Device.flex())
    xt = Tensor.from_data(x, device=Device.flex())
    first = compiled(xt).to_numpy()
    doubled = compiled.map_params(lambda p, path: p.map(lambda t: t * 2.0))
    np.testing.assert_allclose(doubled(xt).to_numpy(), doubled.forward_eager(xt).to_numpy(), rtol=RTOL, atol=1e-5)
    assert not np.allclose(doubled(xt).to_numpy(), first)
    assert compiled.stats["traces"] == 1  # the copy shares the trace


def test_data_dependent_graph_runs_eagerly_with_one_warning(onnx, rng):
    t = onnx.TensorProto
    data = onnx_model(
        onnx,
        [onnx.helper.make_node("NonZero", ["x"], ["y"])],
        [("x", t.FLOAT, [3, 4])],
        [("y", t.INT64, None)],
    )
    compiled = ember.onnx.load(data, Device.flex(), compile=True)
    x = (rng.standard_normal((3, 4)) > 0).astype(np.float32)
    xt = Tensor.from_data(x, device=Device.flex())
    with pytest.warns(CompileWarning):
        out = compiled(xt).to_numpy()
    np.testing.assert_array_equal(out, np.stack(np.nonzero(x)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        np.testing.assert_array_equal(compiled(xt).to_numpy(), np.stack(np.nonzero(x)))
    assert compiled.stats["eager"] == 2


def test_autodiff_device_runs_eagerly_and_differentiates(torch, rng):
    device = Device.flex().autodiff()
    x = rng.standard_normal((2, 1, 28, 28)).astype(np.float32)
    compiled, eager = _pair(export(torch, models.small_cnn(torch), (torch.from_numpy(x),)), device)
    xt = Tensor.from_data(x, device=device)
    grads = [GradientsParams.from_grads(m(x=xt).sum().backward(), m) for m in (compiled, eager)]
    for (path, p), (_, q) in zip(compiled.named_params(), eager.named_params()):
        np.testing.assert_allclose(
            grads[0].get(p.id).to_numpy(), grads[1].get(q.id).to_numpy(), rtol=RTOL, atol=1e-6, err_msg=path
        )
    valid = compiled.valid()
    xv = Tensor.from_data(x, device=Device.flex())
    np.testing.assert_allclose(valid(xv).to_numpy(), eager.valid()(xv).to_numpy(), rtol=RTOL, atol=1e-6)
    assert compiled.stats["traces"] == 1


@pytest.mark.parametrize("gemm", ["ember", "blas"])
def test_conv_batch_norm_and_pools_compile_into_chains(torch, ort, rng, monkeypatch, gemm):
    """A CNN block as inference exports it: Conv, an unfolded BatchNormalization, Relu
    and MaxPool (values only), then a 1x1 Conv with a residual Add. Compiled, each conv
    runs with its epilogue (and pooling) as one convolution chain; outputs match
    onnxruntime and torch, with the products through ember's own (``EMBER_GEMM=ember``)
    or BLAS's."""
    from ember.backend.fusion.llvm import executor as llvm_executor
    from ember.backend.fusion.llvm.sgemm import GEMM_ENV
    from ember.backend.fusion.steps import ConvChain, Library

    monkeypatch.setenv(GEMM_ENV, gemm)
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.norm = nn.BatchNorm2d(8)
            self.pool = nn.MaxPool2d(2)
            self.point = nn.Conv2d(8, 8, 1)

        def forward(self, x):
            h = self.pool(torch.relu(self.norm(self.conv(x))))
            return torch.relu(self.point(h) + h)

    torch.manual_seed(0)
    net = Block().eval()
    with torch.no_grad():
        net.norm.running_mean.normal_()
        net.norm.running_var.uniform_(0.5, 2.0)
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    # PRESERVE keeps the BatchNormalization node (eval mode folds it into the conv).
    data = export(
        torch, net, (torch.from_numpy(x),), training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False
    )
    compiled = ember.onnx.load(data, Device.flex(), compile=True)
    xt = Tensor.from_data(x, device=Device.flex())
    variants = []
    original = llvm_executor.Variant.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        variants.append(self)

    monkeypatch.setattr(llvm_executor.Variant, "__init__", record)
    for _ in range(3):  # trace, then compile on the second call, then replay
        got = compiled(xt).to_numpy()
    with torch.no_grad():
        np.testing.assert_allclose(got, net(torch.from_numpy(x)).numpy(), rtol=RTOL, atol=1e-5)
    (want,) = run_ort(ort, data, x)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-5)
    (variant,) = variants
    steps = variant.schedule.steps
    chains = [s for s in steps if isinstance(s, ConvChain)]
    assert len(chains) == 2 and chains[0].pool is not None and chains[0].pool.node.op == "max_pool"
    assert not [s for s in steps if isinstance(s, Library)]  # no conv or pool left outside a chain
    assert ('@"ember_sgemm_' in variant.ir) is (gemm == "ember")


def test_a_dynamic_batch_traces_once_per_bucket(torch, ort, rng):
    """``buckets={"x": 0}``: batches 1-9 of an encoder layer trace buckets 2, 4, 8 and 16
    once each; every output matches onnxruntime on the unpadded batch."""
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    data = export(torch, models.encoder(torch), (torch.from_numpy(x),), dynamic={"x": {0: "b"}, "y": {0: "b"}})
    compiled = ember.onnx.load(data, Device.flex(), compile=True, buckets={"x": 0})
    for batch in (3, 1, 2, 5, 7, 4, 8, 9, 6):
        xb = rng.standard_normal((batch, 5, 16)).astype(np.float32)
        got = compiled(Tensor.from_data(xb, device=Device.flex())).to_numpy()
        (want,) = run_ort(ort, data, xb)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-5)
    info = compiled.compiled.cache_info()
    assert info["traces"] == 4 and info["buckets"] == [2, 4, 8, 16] and info["hits"] == 5


def test_buckets_need_compile_and_a_known_input(torch, rng):
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    data = export(torch, models.encoder(torch), (torch.from_numpy(x),), dynamic={"x": {0: "b"}, "y": {0: "b"}})
    with pytest.raises(ember.errors.OnnxError, match="compile=True"):
        ember.onnx.load(data, Device.flex(), buckets={"x": 0})
    with pytest.raises(ember.errors.OnnxError, match="inputs are x"):
        ember.onnx.load(data, Device.flex(), compile=True, buckets={"images": 0})
