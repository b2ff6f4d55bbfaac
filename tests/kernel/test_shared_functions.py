"""Kernel functions shared by name between modules
(:mod:`ember.backend.kernel.llvm.shared`): compiled once per process, declared (not
defined) in the modules that call them, and linked when those are loaded, from a
fresh compile or from the object cache in a new process. The direct convolution is
the shared kernel: flex's eager convolution and a compiled plan of the same layer
call one compiled function."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

from ember.backend.flex import native_direct
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.kernel.llvm import jit, shared
from ember.backend.kernel.llvm.direct_conv import DirectConv, direct_conv_kernel
from tests.fusion.oracle import Case
from tests.kernel.fresh_processes import run_twice


def _conv_reference(x, w, b, pad):
    """float64 stride-1 2-d convolution of ``x`` [N, C, H, W] with ``w`` [O, C, kh, kw]."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad))
    xp[:, :, pad : pad + h, pad : pad + wd] = x
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    y = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i : i + oh, j : j + ow], w[:, :, i, j].astype(np.float64))
    return y + b.astype(np.float64)[None, :, None, None]


def test_a_shared_function_compiles_once_and_modules_declare_it(monkeypatch):
    conv = DirectConv(3, 5, (3, 3), (1, 1), (7, 6), 16 if jit.vector_width() == 512 else 8)
    compiles = []
    real = jit.compile_module

    def counting(*args, **kwargs):
        compiles.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(jit, "compile_module", counting)
    first, second = ir.Module(name="a"), ir.Module(name="b")
    fa = direct_conv_kernel(conv, jit.vector_width()).declare(first)
    fb = direct_conv_kernel(conv, jit.vector_width()).declare(second)
    assert fa.name == fb.name == shared.symbol("ember_direct_conv", ("direct_conv", conv, jit.vector_width()))
    assert fa.is_declaration and fb.is_declaration  # no body in the calling modules
    assert direct_conv_kernel(conv, jit.vector_width()).declare(first) is fa  # one declaration per module
    assert compiles.count([fa.name]) <= 1  # compiled (or loaded) at most once, here or earlier
    assert fa.name in shared._LOADED
    other = DirectConv(3, 5, (3, 3), (1, 1), (7, 7), conv.width)
    assert direct_conv_kernel(other, jit.vector_width()).declare(first).name != fa.name


def test_eager_and_compiled_convolutions_share_the_kernel(monkeypatch, rng):
    monkeypatch.setenv("EMBER_GEMM", "ember")
    x = rng.standard_normal((32, 4, 9, 10)).astype(np.float32)  # eager: 16384 outputs or more
    w = (rng.standard_normal((6, 4, 3, 3)) / 6).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    eager = native_direct.conv(x, w, b, (1, 1), (1, 1), (9, 10), 1)
    assert eager is not None
    before = set(shared._LOADED)
    case = Case()
    y = case.ops.conv(case.input(x), case.input(w), case.input(b), (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    compiled, _, plan = case.run(LLVMExecutor(), [y])
    assert set(shared._LOADED) == before, "the plan compiled a kernel eager had compiled"
    # a convolution with no fused epilogue calls eager's whole batch loop (which calls the kernel)
    names = [n for n in before if n in plan.variants[0].ir]
    assert len(names) == 1 and names[0].startswith("ember_direct_conv_loop_")
    assert f'declare void @"{names[0]}"' in plan.variants[0].ir
    want = _conv_reference(x, w, b, 1)
    np.testing.assert_allclose(eager, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(compiled[0], eager)  # one loop, one kernel: the same bits


_BODY = """
from ember.backend.flex import native_direct
from ember.backend.fusion.llvm import LLVMExecutor
from tests.fusion.oracle import Case
rng = np.random.default_rng(7)
x = rng.standard_normal((48, 3, 8, 8)).astype(np.float32)
w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
b = rng.standard_normal(6).astype(np.float32)
eager = native_direct.conv(x, w, b, (1, 1), (1, 1), (8, 8), 1)
case = Case()
y = case.ops.conv(case.input(x), case.input(w), case.input(b), (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
compiled, _, _ = case.run(LLVMExecutor(), [y])
np.save(sys.argv[1], np.stack([eager, compiled[0]]))
"""


def test_a_new_process_links_cached_code_to_the_shared_kernel(tmp_path):
    compiled, first, second = run_twice(tmp_path, _BODY, {"EMBER_GEMM": "ember"})
    assert compiled[0] >= 3  # the shared kernel, the eager entry and the plan
    if compiled[1] != 0:
        pytest.fail(f"the second process compiled again: {compiled[1]} modules")
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first[0], first[1])  # eager and compiled: one kernel
