"""The op table's kernel-only functions (KernelFn) as the CUDA C printer spells them
compile with NVRTC (no GPU needed), float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest

from tests.cuda_backend.conftest import require_nvrtc

pytestmark = pytest.mark.nvrtc


def test_kernel_functions_compile_in_both_precisions():
    require_nvrtc()
    from ember.backend.cuda import nvrtc
    from ember.backend.cuda.lowering import unary_code
    from ember.backend.kernel.op_table import KernelFn

    body = []
    for t, dtype in (("float", np.float32), ("double", np.float64)):
        calls = " + ".join(unary_code(op, "x[i]", np.dtype(dtype)) for op in KernelFn)
        body.append(
            f'extern "C" __global__ void fns_{t}(const {t}* x, {t}* out, int n) {{\n'
            f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (i < n) out[i] = {calls};\n}}"
        )
    ptx, log = nvrtc.compile_source(nvrtc.full_source("\n".join(body)), "compute_80", output="ptx", use_cache=False)
    text = ptx.decode(errors="replace")
    assert ".entry fns_float" in text and ".entry fns_double" in text, log


def test_reading_nvrtc_output_leaves_python_bytes_alone():
    """NVRTC writes its log and code into the buffers it is given. They were bytes
    objects (``b" " * size``): a clean compile's log is one byte, and ``b" " * 1`` is
    CPython's shared one-byte object, so every ``b" "`` in the process became ``b"\\x00"``
    (a later torch.save/ember.load_pytorch in the same process read a 'corrupt' pickle)."""
    require_nvrtc()
    from ember.backend.cuda import nvrtc

    source = nvrtc.full_source('extern "C" __global__ void clean(float* x) { x[0] = 1.0f; }')
    code, log = nvrtc.compile_source(source, "compute_80", output="ptx", use_cache=False)
    assert b".entry clean" in code
    space = bytes([32])
    assert space == b" " and (b"x" * 1).decode() == "x" and b" ".decode() == " "
