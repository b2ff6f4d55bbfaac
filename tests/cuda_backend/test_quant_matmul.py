"""The quantized matmul of the kernel IR (``ember/backend/kernel/quant.py``): the same
kernels compiled by the LLVM printer and run on the CPU against float64 of the dequantized
weight (int8/uint8/int4; per tensor, per row, per block; with and without bias), and the
cuda backend's ``quantized_linear`` printing them as CUDA C that NVRTC compiles for sm_80
and sm_90 with no spills (no GPU: a recording runtime)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llvmlite import ir

from ember import Tensor
from ember.backend.kernel.llvm import jit
from ember.backend.kernel.llvm.loops import KernelEmitter
from ember.backend.kernel.llvm.mathlib import MathLib
from ember.backend.kernel.llvm.ops import OpEmitter
from ember.backend.kernel.quant import BUFFERS, QuantMatmul, quant_matmul_kernels
from ember.quantization import QuantScheme, quantize
from tests.cuda_backend.conftest import require_nvrtc

SCHEMES = [
    QuantScheme.int8(),
    QuantScheme.int8(symmetric=False),
    QuantScheme.int8(level="tensor"),
    QuantScheme.int8(block=32),
    QuantScheme.int4(),
    QuantScheme.int4(symmetric=False),
    QuantScheme.int4(block=None),
]


def run_on_cpu(kernels, arrays: dict[int, np.ndarray]) -> None:
    """The kernels through the LLVM printer (one function per kernel, one pointer per buffer)."""
    module = ir.Module(name="quant_matmul_test")
    module.triple, module.data_layout = jit.triple(), jit.data_layout()
    math_lib = MathLib(module)
    ops = OpEmitter(math_lib)
    ids = sorted(arrays)
    ptr = ir.PointerType()
    names = []
    for i, kernel in enumerate(kernels):
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * (len(ids) + 1)), name=f"k{i}")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        KernelEmitter(math_lib, ops, b, kernel, dict(zip(ids, fn.args)), None, fn.args[-1]).emit()
        b.ret_void()
        names.append(fn.name)
    compiled = jit.compile_module(str(module), names)
    args = [arrays[i].ctypes.data_as(ctypes.c_void_p) for i in ids] + [None]
    for name in names:
        ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(ids) + 1))(compiled.addresses[name])(*args)


def product(scheme: QuantScheme, m: int, n: int, k: int, bias: bool, rng):
    w = rng.standard_normal((n, k)).astype(np.float32)
    q = quantize(Tensor.from_data(w), scheme)
    parts = {
        BUFFERS["x"]: rng.standard_normal((m, k)).astype(np.float32),
        BUFFERS["values"]: q.values.to_numpy(),
        BUFFERS["scales"]: q.scales.to_numpy(),
    }
    if q.zero_points is not None:
        parts[BUFFERS["zeros"]] = q.zero_points.to_numpy()
    if bias:
        parts[BUFFERS["bias"]] = rng.standard_normal(n).astype(np.float32)
    p = QuantMatmul(
        m,
        n,
        k,
        q.group,
        scheme.value,
        parts[BUFFERS["values"]].dtype == np.int8,
        q.zero_points is not None,
        bias,
        scheme.level == "tensor",
    )
    return q, parts, p


@pytest.mark.parametrize("scheme", SCHEMES, ids=repr)
@pytest.mark.parametrize("m", [1, 5])
def test_quantized_matmul_kernels_match_float64_of_the_dequantized_weight(scheme, m, rng):
    n, k = 24, 128
    for bias in (False, True):
        q, parts, p = product(scheme, m, n, k, bias, rng)
        kernels = quant_matmul_kernels(p)
        assert len(kernels) == (1 if p.groups == 1 else 2)
        arrays = dict(parts)
        arrays[BUFFERS["out"]] = np.full((m, n), np.nan, np.float32)
        if len(kernels) > 1:
            arrays[BUFFERS["partial"]] = np.full((m, n, p.groups), np.nan, np.float32)
        run_on_cpu(kernels, arrays)
        expected = parts[BUFFERS["x"]].astype(np.float64) @ q.dequantize().to_numpy().astype(np.float64).T
        if bias:
            expected += parts[BUFFERS["bias"]]
        np.testing.assert_allclose(arrays[BUFFERS["out"]], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cuda_quantized_linear_compiles_with_nvrtc(arch, rng):
    """The cuda backend's quantized_linear, on a recording runtime: the kernels it would
    launch for every scheme (bias or not; decode and prefill rows) compile to cubin."""
    require_nvrtc()
    from ember.backend.cuda.backend import CudaBackend
    from ember.backend.cuda.catalog import RecordingRuntime, batches
    from ember.backend.cuda.nvrtc import compile_ptx_and_cubin, resources

    runtime = RecordingRuntime(arch)
    backend = CudaBackend(runtime=runtime)

    def weight_only(on, scheme, q):
        return backend.quantized_linear(
            on[BUFFERS["x"]],
            on[BUFFERS["values"]],
            on[BUFFERS["scales"]],
            on.get(BUFFERS["zeros"]),
            on.get(BUFFERS["bias"]),
            None,
            scheme.value,
            q.group,
            "",
        )

    for scheme in SCHEMES:
        for m, bias in ((1, False), (7, True)):
            q, parts, p = product(scheme, m, 40, 64, bias, rng)
            on = {b: backend.from_numpy(a) for b, a in parts.items()}
            out = weight_only(on, scheme, q)
            assert out.shape == (m, 40) and out.dtype == np.float32
    launches, compiled = runtime.stats["launches"], len(runtime.sources)
    again = weight_only(on, scheme, q)
    assert again.shape == (7, 40)  # a repeat: its cached launches, nothing compiled again
    assert len(runtime.sources) == compiled and runtime.stats["launches"] == launches + len(quant_matmul_kernels(p))
    # The activation schemes round the input to its int8 grid, then run the same kernels.
    for activations, scale in (("dynamic", None), ("static", np.array([0.02], np.float32))):
        q, parts, _ = product(QuantScheme.int8(activations=activations), 3, 40, 64, True, rng)
        on = {b: backend.from_numpy(a) for b, a in parts.items()}
        out = backend.quantized_linear(
            on[BUFFERS["x"]],
            on[BUFFERS["values"]],
            on[BUFFERS["scales"]],
            None,
            on[BUFFERS["bias"]],
            None if scale is None else backend.from_numpy(scale),
            "int8",
            q.group,
            activations,
        )
        assert out is not NotImplemented and out.shape == (3, 40)
    found = sorted(runtime.sources.values())
    assert len(found) >= 14
    (source,) = batches(found, len(found))
    ptx, cubin, log = compile_ptx_and_cubin(source, arch, extra=("-Xptxas=-v",))
    assert cubin[:4] == b"\x7fELF" and f".target {arch}" in ptx.decode(errors="replace")
    report = resources(log)
    assert set(report) == {name for name, _ in found}
    for name, r in report.items():
        assert r.spill_stores + r.spill_loads == 0, f"{name} spills on {arch}: {r}"
