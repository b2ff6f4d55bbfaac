"""flex's direct convolutions (:mod:`ember.backend.flex.native_direct`: the batch loop
over the direct kernel that compiled plans run): float32 stride-1 convolutions with
small windows, forward and transposed, against torch in float64 (1-3 spatial dims,
groups, dilation, asymmetric padding, output padding, special values); that the
default runs them on hosts with 512-bit vectors (``EMBER_GEMM=ember`` forces them,
``blas`` turns them off), and that eager and compiled W3 steps then agree."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device
from ember.backend.flex import native_direct
from ember.backend.kernel.llvm import jit
from ember.backend.module_ops import conv_output_size
from tests.conftest import assert_close, import_torch

pytestmark = pytest.mark.torch

FLEX = Device.flex()._backend

# (x shape, weight shape, padding pairs, dilation, groups)
_CONVS = [
    ((64, 1, 28, 28), (16, 1, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),  # W3's first layer
    ((64, 16, 14, 14), (32, 16, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),  # W3's second
    ((40, 6, 13, 11), (9, 2, 3, 2), ((2, 0), (1, 3)), (2, 1), 3),  # groups, dilation, asymmetric
    ((16, 4, 300), (8, 4, 5), ((2, 2),), (1,), 1),  # 1-D
    ((6, 3, 9, 10, 11), (4, 3, 3, 3, 3), ((1, 1), (0, 2), (1, 0)), (1, 1, 1), 1),  # 3-D
]


def _torch_conv(torch, x, w, bias, padding, dilation, groups):
    f = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[x.ndim - 2]
    pads = [p for pair in reversed(padding) for p in pair]
    xt = torch.nn.functional.pad(torch.from_numpy(x.astype(np.float64)), pads)
    b = None if bias is None else torch.from_numpy(bias.astype(np.float64))
    return f(xt, torch.from_numpy(w.astype(np.float64)), b, dilation=dilation, groups=groups).numpy()


def _out(x_shape, w_shape, padding, dilation):
    return tuple(conv_output_size(*a) for a in zip(x_shape[2:], w_shape[2:], (1,) * len(padding), padding, dilation))


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("case", _CONVS, ids=["w3a", "w3b", "groups", "1d", "3d"])
def test_direct_convolution_matches_torch(monkeypatch, case, with_bias, rng):
    monkeypatch.setenv("EMBER_GEMM", "ember")
    torch = import_torch()
    x_shape, w_shape, padding, dilation, groups = case
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32) if with_bias else None
    out = _out(x_shape, w_shape, padding, dilation)
    direct = native_direct.conv(x, w, bias, tuple(lo for lo, _ in padding), dilation, out, groups)
    assert direct is not None
    want = _torch_conv(torch, x, w, bias, padding, dilation, groups)
    assert_close(direct, want, rtol=1e-5, atol=1e-5 * max(float(np.abs(want).max()), 1.0))
    # flex's conv takes the same path, and agrees with its column path to rounding
    y = FLEX.conv(x, w, bias, (1,) * len(padding), padding, dilation, groups)
    np.testing.assert_array_equal(y, direct)
    monkeypatch.setenv("EMBER_GEMM", "blas")
    columns = FLEX.conv(x, w, bias, (1,) * len(padding), padding, dilation, groups)
    assert_close(y, columns, rtol=1e-5, atol=1e-5 * max(float(np.abs(want).max()), 1.0))


@pytest.mark.parametrize("case", [_CONVS[0], _CONVS[1], _CONVS[3]], ids=["w3a", "w3b", "1d"])
def test_the_input_gradient_runs_the_direct_kernel(monkeypatch, case, rng):
    """A convolution's input gradient is a stride-1 transposed convolution: the direct
    kernel with the flipped kernel, against torch's autograd in float64 (symmetric
    padding, as torch's convolutions take it; the next test has groups, dilation and
    output padding)."""
    monkeypatch.setenv("EMBER_GEMM", "ember")
    torch = import_torch()
    x_shape, w_shape, padding, dilation, groups = case
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    f = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[x.ndim - 2]
    ref = f(
        xt, torch.from_numpy(w.astype(np.float64)), padding=[lo for lo, _ in padding], dilation=dilation, groups=groups
    )
    g = rng.standard_normal(ref.shape).astype(np.float32)
    (want,) = torch.autograd.grad(ref, (xt,), torch.from_numpy(g.astype(np.float64)))
    want = want.numpy()
    output_padding = tuple(
        s - ((o - 1) - lo - hi + d * (k - 1) + 1)
        for s, o, (lo, hi), d, k in zip(x_shape[2:], g.shape[2:], padding, dilation, w_shape[2:])
    )
    direct = native_direct.conv_transpose(g, w, None, padding, output_padding, dilation, groups)
    assert direct is not None and direct.shape == x.shape
    assert_close(direct, want, rtol=1e-5, atol=1e-5 * max(float(np.abs(want).max()), 1.0))
    y = FLEX.conv_transpose(g, w, None, (1,) * len(padding), padding, output_padding, dilation, groups)
    np.testing.assert_array_equal(y, direct)


def test_a_transposed_convolution_with_bias_and_output_padding(monkeypatch, rng):
    monkeypatch.setenv("EMBER_GEMM", "ember")
    torch = import_torch()
    x = rng.standard_normal((24, 6, 17, 19)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    padding, output_padding, dilation, groups = ((1, 1), (0, 0)), (1, 0), (2, 1), 3
    direct = native_direct.conv_transpose(x, w, bias, padding, output_padding, dilation, groups)
    assert direct is not None
    f64 = torch.float64
    want = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(x).to(f64), torch.from_numpy(w).to(f64), torch.from_numpy(bias).to(f64),
        padding=(1, 0), output_padding=output_padding, dilation=dilation, groups=groups,
    ).numpy()  # fmt: skip
    assert_close(direct, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_special_values_propagate(monkeypatch, rng):
    """A NaN or an infinity in the input reaches exactly the outputs whose windows hold
    it (every weight positive, so no infinity meets its opposite)."""
    monkeypatch.setenv("EMBER_GEMM", "ember")
    torch = import_torch()
    x = rng.standard_normal((8, 4, 20, 20)).astype(np.float32)
    x[0, 1, 5, 5], x[1, 2, 0, 19] = np.nan, np.inf
    w = np.abs(rng.standard_normal((8, 4, 3, 3))).astype(np.float32)
    padding = ((1, 1), (1, 1))
    direct = native_direct.conv(x, w, None, (1, 1), (1, 1), (20, 20), 1)
    want = _torch_conv(torch, x, w, None, padding, (1, 1), 1)
    assert direct is not None
    np.testing.assert_array_equal(np.isnan(direct), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(direct), np.isposinf(want))
    finite = np.isfinite(want)
    assert_close(direct[finite], want[finite], rtol=1e-5, atol=1e-5 * np.abs(want[finite]).max())


def test_where_the_direct_kernel_runs(monkeypatch, rng):
    x = rng.standard_normal((8, 16, 14, 14)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    args = (None, (1, 1), (1, 1), (14, 14), 1)
    monkeypatch.setenv("EMBER_GEMM", "auto")
    assert (native_direct.conv(x, w, *args) is not None) is (jit.vector_width() == 512)
    monkeypatch.setenv("EMBER_GEMM", "blas")
    assert native_direct.conv(x, w, *args) is None
    monkeypatch.setenv("EMBER_GEMM", "ember")
    assert native_direct.conv(x, w, *args) is not None
    # float64, a 1x1 kernel and a window wider than the kernel takes stay on the columns
    assert native_direct.conv(x.astype(np.float64), w.astype(np.float64), *args) is None
    assert native_direct.conv(x, w[:, :, :1, :1], None, (0, 0), (1, 1), (14, 14), 1) is None
    wide = rng.standard_normal((8, 80, 3, 3)).astype(np.float32)
    assert native_direct.conv(rng.standard_normal((8, 80, 14, 14)).astype(np.float32), wide, *args) is None


def test_eager_and_compiled_w3_steps_agree(monkeypatch):
    """W3's training step, eager and ``ember.compile``d, with the direct kernel in
    both: the losses of 20 steps within 1e-5 relative."""
    monkeypatch.setenv("EMBER_GEMM", "ember")
    import ember
    from benchmarks.compile import ember_parts
    from ember.optim import AdamConfig, GradientsParams

    def run(compiled: bool) -> list[float]:
        model, x, y, loss_fn = ember_parts("W3", Device.flex().autodiff())
        optim = AdamConfig().init()

        def step(model, x, y):
            loss = loss_fn(model(x), y)
            return optim.step(1e-3, model, GradientsParams.from_grads(loss.backward(), model)), loss

        fn = ember.compile(step) if compiled else step
        losses = []
        for _ in range(20):
            model, loss = fn(model, x, y)
            losses.append(loss.into_scalar())
        return losses

    np.testing.assert_allclose(run(True), run(False), rtol=1e-5)


def test_one_kernel_serves_every_batch_size(monkeypatch, rng):
    """The sample count is a run-time value: a ragged last batch or a validation batch
    reuses the training batch's kernel."""
    monkeypatch.setenv("EMBER_GEMM", "ember")
    from ember.backend.flex import native_pool

    torch = import_torch()
    w = (rng.standard_normal((24, 5, 3, 3)) / 7).astype(np.float32)

    def kernels() -> int:
        return sum(
            1
            for key in list(native_pool._STATE)
            if isinstance(key, tuple) and key[0] == "direct" and key[1].spatial == (13, 17) and key[1].c_in == 5
        )

    for n in (16, 7, 40):
        x = rng.standard_normal((n, 5, 13, 17)).astype(np.float32)
        y = native_direct.conv(x, w, None, (1, 1), (1, 1), (13, 17), 1)
        assert y is not None
        want = _torch_conv(torch, x, w, None, ((1, 1), (1, 1)), (1, 1), 1)
        assert_close(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert kernels() == 1


def test_threads_convolving_one_geometry_at_once(monkeypatch, rng):
    """Two threads running the same geometry's convolution and weight gradient at once
    (ctypes lets go of the GIL during the call) get the results each gets alone: the
    padded inputs and accumulators are the call's own, not the compiled code's."""
    import threading

    monkeypatch.setenv("EMBER_GEMM", "ember")
    w = (rng.standard_normal((32, 16, 3, 3)) / 12).astype(np.float32)
    xs = [rng.standard_normal((16, 16, 14, 14)).astype(np.float32) for _ in range(2)]
    gs = [rng.standard_normal((16, 32, 14, 14)).astype(np.float32) for _ in range(2)]

    def run(i):
        y = native_direct.conv(xs[i], w, None, (1, 1), (1, 1), (14, 14), 1)
        dw = native_direct.conv_weight_grad(xs[i], gs[i], w.shape, (1, 1), (1, 1), 1)
        return y, dw

    alone = [run(i) for i in range(2)]
    assert all(part is not None for pair in alone for part in pair)
    got: dict[int, list] = {0: [], 1: []}

    def worker(i):
        for _ in range(20):
            got[i].append(run(i))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        for y, dw in got[i]:
            np.testing.assert_array_equal(y, alone[i][0])
            np.testing.assert_array_equal(dw, alone[i][1])
