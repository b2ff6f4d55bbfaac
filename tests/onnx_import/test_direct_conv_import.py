"""The small CNN of ``benchmarks/onnx_runtimes.py`` imported and compiled with its
convolutions on the direct kernel (:mod:`ember.backend.kernel.llvm.direct_conv`) and
its poolings over vectors: against onnxruntime and torch's float64 forward, at batch 1
and at an odd batch."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from tests.onnx_import import models
from tests.onnx_import.helpers import export, run_ort


@pytest.mark.parametrize("batch", [1, 5])
def test_the_small_cnn_runs_direct_convolutions_and_matches_onnxruntime(torch, ort, rng, monkeypatch, batch):
    from ember.backend.fusion.llvm import executor as llvm_executor
    from ember.backend.fusion.llvm.sgemm import GEMM_ENV
    from ember.backend.fusion.steps import ConvChain

    monkeypatch.setenv(GEMM_ENV, "ember")
    net = models.small_cnn(torch).eval()
    x = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
    data = export(torch, net, (torch.from_numpy(x),))
    variants = []
    original = llvm_executor.Variant.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        variants.append(self)

    monkeypatch.setattr(llvm_executor.Variant, "__init__", record)
    compiled = ember.onnx.load(data, Device.flex(), compile=True)
    xt = Tensor.from_data(x, device=Device.flex())
    for _ in range(3):  # trace, then compile on the second call, then replay
        got = compiled(xt).to_numpy()
    (want,) = run_ort(ort, data, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        reference = net.double()(torch.from_numpy(x.astype(np.float64))).numpy()
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-5)
    (variant,) = variants
    chains = [s for s in variant.schedule.steps if isinstance(s, ConvChain)]
    assert len(chains) == 2 and all(c.pool is not None for c in chains)
    # both convolutions on the direct kernel: the shared functions the plan declares
    kernels = re.findall(r'^declare [^@]*@"ember_direct_conv_[0-9a-f]+"\(', variant.ir, re.MULTILINE)
    assert len(kernels) == 2
