"""flex's direct weight gradients (:func:`ember.backend.flex.native_direct.conv_weight_grad`:
the batch loop and shared kernel compiled plans run,
:mod:`ember.backend.kernel.llvm.direct_weight_batch`): against torch's float64 weight
gradient (1-3 spatial dims, groups, dilation, asymmetric padding, special values,
rows narrower than a 16-lane vector: 8-lane vectors where they fill them better);
one compiled loop for every batch size; eager and compiled weight gradients of a
layer bit for bit the same (one shared kernel, in this process and in a new one that
loads the cached code); ``EMBER_GEMM=blas`` turns it off."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device
from ember.backend.flex import native_direct, native_pool
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.kernel.llvm import jit, shared
from tests.conftest import assert_close, import_torch
from tests.fusion.oracle import Case
from tests.kernel.fresh_processes import run_twice

pytestmark = pytest.mark.torch

FLEX = Device.flex()._backend

# (x shape, weight shape, padding pairs, dilation, groups); each output row fills
# at least 3/4 of its vectors' lanes (16, or 8 where those fill it better)
_GRADS = {
    "w3a": ((64, 1, 28, 28), (16, 1, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),  # W3's first layer
    "w3b": ((64, 16, 14, 14), (32, 16, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),  # W3's second
    "groups": ((40, 6, 13, 11), (9, 2, 3, 2), ((2, 0), (1, 3)), (2, 1), 3),  # dilation, asymmetric
    "1d": ((16, 4, 300), (8, 4, 5), ((2, 1),), (1,), 1),
    "3d": ((24, 3, 9, 10, 15), (4, 3, 3, 3, 3), ((1, 1), (0, 2), (1, 0)), (1, 1, 1), 1),
    "digits1": ((32, 1, 8, 8), (16, 1, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),  # digits' first layer: 8-wide rows
    "digits2": ((32, 16, 8, 8), (32, 16, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),  # digits' second
    "narrow7": ((40, 6, 9, 6), (8, 3, 3, 3), ((2, 0), (1, 2)), (1, 1), 2),  # 7-wide rows, groups, asymmetric
    "narrow12": ((20, 6, 9, 12), (9, 2, 3, 3), ((1, 1), (1, 1)), (1, 1), 3),  # 16 lanes at 3/4, groups
}
#: Output rows' widths and the lanes the direct kernel takes them with on an AVX-512
#: host (``None``: it leaves them to im2col and the product)
_LANES = {"digits2": 8, "narrow7": 8, "narrow12": 16, "w3b": 16}


def _out(x_shape, w_shape, padding, dilation):
    return tuple(s + lo + hi - d * (k - 1) for s, (lo, hi), d, k in zip(x_shape[2:], padding, dilation, w_shape[2:]))


def _torch_weight_grad(torch, x, dy, w_shape, padding, dilation, groups):
    fn = (torch.nn.grad.conv1d_weight, torch.nn.grad.conv2d_weight, torch.nn.grad.conv3d_weight)[x.ndim - 3]
    pads = [p for pair in reversed(padding) for p in pair]  # F.pad: last dim first
    xt = torch.nn.functional.pad(torch.from_numpy(x.astype(np.float64)), pads)
    return fn(xt, w_shape, torch.from_numpy(dy.astype(np.float64)), dilation=dilation, groups=groups).numpy()


def _inputs(rng, case):
    x_shape, w_shape, padding, dilation, _ = case
    x = rng.standard_normal(x_shape).astype(np.float32)
    dy = rng.standard_normal((x_shape[0], w_shape[0], *_out(x_shape, w_shape, padding, dilation))).astype(np.float32)
    return x, dy


def _direct(x, dy, case):
    _, w_shape, padding, dilation, groups = case
    return native_direct.conv_weight_grad(x, dy, w_shape, tuple(lo for lo, _ in padding), dilation, groups)


def _flex(x, dy, case):
    _, w_shape, padding, dilation, groups = case
    return FLEX.conv_weight_grad(x, dy, w_shape, (1,) * len(padding), padding, dilation, groups)


@pytest.mark.parametrize("name", sorted(_GRADS))
def test_direct_weight_gradient_matches_torch(monkeypatch, name, rng):
    monkeypatch.setenv("EMBER_GEMM", "ember")
    torch = import_torch()
    case = _GRADS[name]
    x, dy = _inputs(rng, case)
    direct = _direct(x, dy, case)
    assert direct is not None
    want = _torch_weight_grad(torch, x, dy, *case[1:])
    scale = max(float(np.abs(want).max()), 1.0)
    assert_close(direct, want, rtol=1e-5, atol=2e-6 * scale)
    # flex's conv_weight_grad takes the same path, and agrees with its columns to rounding
    np.testing.assert_array_equal(_flex(x, dy, case), direct)
    monkeypatch.setenv("EMBER_GEMM", "blas")
    assert _direct(x, dy, case) is None
    assert_close(_flex(x, dy, case), want, rtol=1e-5, atol=2e-6 * scale)


def test_special_values_reach_the_weights_they_touch(monkeypatch, rng):
    """NaN and infinities in the input or the output gradient reach exactly the weights
    torch's reach (the lanes past a row's end add nothing)."""
    monkeypatch.setenv("EMBER_GEMM", "ember")
    torch = import_torch()
    case = ((24, 3, 10, 14), (11, 3, 3, 3), ((1, 1), (1, 1)), (1, 1), 1)
    x, dy = _inputs(rng, case)
    x[0, 1, 4, 4], x[1, 0, 0, 13], x[20, 2, 9, 0] = np.nan, np.inf, -np.inf
    dy[22, 7, 4, 0] = np.inf  # a row's first column: the row before's last vector would read it
    direct = _direct(x, dy, case)
    assert direct is not None
    want = _torch_weight_grad(torch, x, dy, *case[1:])
    assert np.isnan(want).any() and np.isinf(want).any() and np.isfinite(want).any()
    np.testing.assert_array_equal(np.isnan(direct), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(direct), np.isinf(want))
    finite = np.isfinite(want)
    assert_close(direct[finite], want[finite], rtol=1e-5, atol=1e-4)


def test_where_the_direct_weight_gradient_runs(monkeypatch, rng):
    case = _GRADS["w3b"]
    x, dy = _inputs(rng, case)
    monkeypatch.setenv("EMBER_GEMM", "auto")
    assert (_direct(x, dy, case) is not None) is (jit.vector_width() == 512)
    monkeypatch.setenv("EMBER_GEMM", "ember")
    assert _direct(x, dy, case) is not None
    assert _direct(x.astype(np.float64), dy.astype(np.float64), case) is None
    # rows too narrow to fill even 8-lane vectors (5 wide), and a window too wide
    narrow = ((64, 16, 8, 5), (32, 16, 3, 3), ((1, 1), (1, 1)), (1, 1), 1)
    assert _direct(*_inputs(rng, narrow), narrow) is None
    wide = ((16, 80, 14, 14), (32, 80, 3, 3), ((1, 1), (1, 1)), (1, 1), 1)
    assert _direct(*_inputs(rng, wide), wide) is None
    # fewer output gradients than flex's native threshold
    assert _direct(x[:1], dy[:1], case) is None


def _lanes_taken(x, dy, case) -> int:
    """The vector width of the direct weight gradient's loop that ran ``case``."""
    assert _direct(x, dy, case) is not None
    (width,) = {
        key[1].conv.width
        for key in list(native_pool._STATE)
        if isinstance(key, tuple)
        and key[0] == "direct_weight_grad"
        and (key[1].c_in, key[1].c_out, key[1].spatial) == (x.shape[1], dy.shape[1], x.shape[2:])
    }
    return width


@pytest.mark.parametrize("width", [5, 7, 8, 12])
def test_narrow_rows_against_torch(monkeypatch, width, rng):
    """Rows narrower than a 16-lane vector, with groups and asymmetric padding: flex's
    weight gradient (direct where 8 or 16 lanes fill the rows' vectors, else im2col and
    the product) against torch's float64 one."""
    monkeypatch.setenv("EMBER_GEMM", "ember")
    torch = import_torch()
    case = ((64, 4, 8, width), (8, 2, 3, 3), ((1, 1), (2, 0)), (1, 1), 2)
    x, dy = _inputs(rng, case)
    want = _torch_weight_grad(torch, x, dy, *case[1:])
    scale = max(float(np.abs(want).max()), 1.0)
    assert (_direct(x, dy, case) is not None) is (width != 5)
    assert_close(_flex(x, dy, case), want, rtol=1e-5, atol=2e-6 * scale)


@pytest.mark.skipif(jit.vector_width() != 512, reason="the lane choice is between 16 and 8 lanes (AVX-512)")
@pytest.mark.parametrize("name", sorted(_LANES))
def test_rows_take_the_lanes_that_fill_them(monkeypatch, name, rng):
    monkeypatch.setenv("EMBER_GEMM", "ember")
    case = _GRADS[name]
    assert _lanes_taken(*_inputs(rng, case), case) == _LANES[name]


def test_one_loop_serves_every_batch_size(monkeypatch, rng):
    """The sample count is a run-time value: a ragged last batch or a validation batch
    reuses the training batch's loop (40 samples run three chunks, the last short)."""
    monkeypatch.setenv("EMBER_GEMM", "ember")
    torch = import_torch()
    case = ((0, 5, 13, 14), (24, 5, 3, 3), ((1, 1), (1, 1)), (1, 1), 1)

    def loops() -> int:
        return sum(
            1
            for key in list(native_pool._STATE)
            if isinstance(key, tuple) and key[0] == "direct_weight_grad" and key[1].spatial == (13, 14)
        )

    for n in (16, 5, 40):
        sized = ((n, *case[0][1:]), *case[1:])
        x, dy = _inputs(rng, sized)
        direct = _direct(x, dy, sized)
        assert direct is not None
        want = _torch_weight_grad(torch, x, dy, *case[1:])
        assert_close(direct, want, rtol=1e-5, atol=2e-6 * np.abs(want).max())
    assert loops() == 1


@pytest.mark.parametrize("name", ["w3a", "w3b", "groups", "digits1", "digits2", "narrow7", "narrow12"])
def test_eager_and_compiled_weight_gradients_are_one_kernel(monkeypatch, name, rng):
    """A compiled plan's ``conv_weight_grad`` declares the shared batch loop eager
    compiled (it compiles no kernel of its own, and emits none of the loop), and gives
    the same weight gradient bit for bit."""
    monkeypatch.setenv("EMBER_GEMM", "ember")
    case = _GRADS[name]
    x, dy = _inputs(rng, case)
    eager = _direct(x, dy, case)
    assert eager is not None
    before = set(shared._LOADED)
    c = Case()
    _, w_shape, padding, dilation, groups = case
    grad = c.ops.conv_weight_grad(c.input(x), c.input(dy), w_shape, (1,) * len(padding), padding, dilation, groups)
    compiled, _, plan = c.run(LLVMExecutor(), [grad])
    assert set(shared._LOADED) == before, "the plan compiled a kernel eager had compiled"
    ir_text = plan.variants[0].ir
    names = sorted(n for n in before if n in ir_text)
    assert [n.rsplit("_", 1)[0] for n in names] == ["ember_direct_dw_loop"]
    assert all(f'declare void @"{n}"' in ir_text for n in names)
    np.testing.assert_array_equal(compiled[0], eager)


_BODY = """
from ember.backend.flex import native_direct
from ember.backend.fusion.llvm import LLVMExecutor
from tests.fusion.oracle import Case
rng = np.random.default_rng(7)
x = rng.standard_normal((48, 3, 16, 16)).astype(np.float32)
dy = rng.standard_normal((48, 6, 16, 16)).astype(np.float32)
eager = native_direct.conv_weight_grad(x, dy, (6, 3, 3, 3), (1, 1), (1, 1), 1)
case = Case()
gw = case.ops.conv_weight_grad(case.input(x), case.input(dy), (6, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
compiled, _, _ = case.run(LLVMExecutor(), [gw])
np.save(sys.argv[1], np.stack([eager, compiled[0]]))
"""


def test_a_new_process_links_the_cached_eager_loop_to_the_shared_kernel(tmp_path):
    """The second process loads the eager loop from the object cache by its recipe
    (registering the shared functions first, or LLVM would abort) and compiles nothing."""
    compiled, first, second = run_twice(tmp_path, _BODY, {"EMBER_GEMM": "ember"})
    assert compiled[0] >= 4  # the two shared functions, the eager loop and the plan
    if compiled[1] != 0:
        pytest.fail(f"the second process compiled again: {compiled[1]} modules")
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first[0], first[1])  # eager and compiled: one kernel
