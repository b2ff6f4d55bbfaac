"""Issue 28 on cube: the FFTs are WGSL kernels (radix-2 Stockham passes for powers of
two, Bluestein's chirp-z for other lengths) that read nothing back to the host; complex64
elementwise ops and reductions run as kernels too; the decompositions take the
documented host path (one read back of the operands, one upload of the results)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Tensor, linalg
from tests.fft.helpers import assert_complex_close


def _c64(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


@pytest.mark.parametrize("n", [64, 60, 13])
def test_ffts_are_gpu_kernels_without_read_backs(gpu, backend, rng, n):
    a = _c64(rng, (3, n))
    x = Tensor.from_data(a, device=gpu)
    ember.fft.fft(x).to_numpy()  # builds and caches the kernels and a Bluestein plan
    gpu.sync()
    stats = backend.runtime.stats
    before = dict(stats)
    y = ember.fft.ifft(ember.fft.fft(x).mul(2.0))
    r = ember.fft.rfft(x.real(), norm="ortho")
    gpu.sync()
    assert stats["readbacks"] == before["readbacks"]  # nothing went to the host
    assert stats["launches"] > before["launches"]
    kernels = {key[0] for key in backend.cache._kernels if isinstance(key, tuple)}
    assert "fft_radix2" in kernels
    assert_complex_close(y, 2 * a, rtol=1e-4, atol=1e-4)
    assert_complex_close(r, np.fft.rfft(a.real.astype(np.float64), norm="ortho"), rtol=1e-4, atol=1e-4)


def test_complex64_elementwise_and_reductions_stay_on_the_gpu(gpu, backend, rng):
    a, b = _c64(rng, (4, 33)), _c64(rng, (4, 33))
    x, y = Tensor.from_data(a, device=gpu), Tensor.from_data(b, device=gpu)
    gpu.sync()
    before = backend.runtime.stats["readbacks"]
    outs = [x.mul(y).add(x.conj()).exp(), x.div(y).sum_dim(1), x.abs().add(y.angle()), x.mean_dim(0)]
    gpu.sync()
    assert backend.runtime.stats["readbacks"] == before
    a2, b2 = a.astype(np.complex128), b.astype(np.complex128)
    wanted = [
        np.exp(a2 * b2 + np.conj(a2)),
        (a2 / b2).sum(1, keepdims=True),
        np.abs(a2) + np.angle(b2),
        a2.mean(0, keepdims=True),
    ]
    for ours, theirs in zip(outs, wanted):
        assert_complex_close(ours, theirs, rtol=2e-5, atol=2e-5)


def test_decompositions_take_the_documented_host_path(gpu, backend, rng):
    """``CubeBackend``'s docstring: operands read back, numpy's LAPACK, results uploaded."""
    assert "device -> host" in type(backend).__doc__ and "host -> device" in type(backend).__doc__
    m = rng.standard_normal((2, 5, 5)).astype(np.float32) + 5 * np.eye(5, dtype=np.float32)
    a = Tensor.from_data(m, device=gpu)
    gpu.sync()
    stats = backend.runtime.stats
    reads, ups = stats["readbacks"], stats["uploads"]
    inverse = linalg.inv(a)
    gpu.sync()
    assert stats["readbacks"] == reads + 1 and stats["uploads"] > ups
    assert inverse.device == gpu
    np.testing.assert_allclose(inverse.to_numpy(), np.linalg.inv(m.astype(np.float64)), rtol=1e-4, atol=1e-5)
