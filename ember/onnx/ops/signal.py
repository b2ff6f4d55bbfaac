"""Signal processing: the window functions HannWindow, HammingWindow, BlackmanWindow
(opset 17; their one input is the window's length, read on the host, and the window a
host value) and DFT (on ember's matmul: differentiable)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.dtypes import numpy_dtype
from ember.onnx.ops.common import scalar
from ember.onnx.ops.registry import Node, numpy_op, op
from ember.tensor import Tensor


def _hann(n: np.ndarray, length: int) -> np.ndarray:
    return np.sin(n * np.pi / length) ** 2


def _hamming(n: np.ndarray, length: int) -> np.ndarray:
    alpha = 25.0 / 46.0
    return alpha - (1 - alpha) * np.cos(2 * np.pi * n / length)


def _blackman(n: np.ndarray, length: int) -> np.ndarray:
    return 0.42 - 0.5 * np.cos(2 * np.pi * n / length) + 0.08 * np.cos(4 * np.pi * n / length)


_WINDOWS = {"HannWindow": _hann, "HammingWindow": _hamming, "BlackmanWindow": _blackman}


def _window_builder(node: Node) -> Callable[..., Any]:
    shape = _WINDOWS[node.op_type]
    periodic = bool(node.attr("periodic", 1))
    dtype = numpy_dtype(int(node.attr("output_datatype", 1)), node.label)

    def run(size: Any) -> np.ndarray:
        n = int(scalar(size))
        length = n if periodic else n - 1
        return shape(np.arange(n, dtype=np.float64), max(length, 1)).astype(dtype)

    return run


for _name in _WINDOWS:
    op(_name, host=(0,), since=17)(_window_builder)
    numpy_op(_name)(_window_builder)


def _along(x: Tensor, a: int, matrix: np.ndarray) -> Tensor:
    """``x`` with axis ``a`` replaced by ``matrix @ x[.., :, ..]`` (``matrix`` ``[out, in]``)."""
    m = Tensor.from_data(matrix.astype(x.dtype.np), device=x.device)
    return x.movedim(a, -1).matmul(m.permute([1, 0])).movedim(-1, a)


def _fit(x: Tensor, a: int, length: int) -> Tensor:
    """Axis ``a`` cut or zero-padded to ``length``."""
    n = x.dims()[a]
    if length < n:
        return x.narrow(a, 0, length)
    if length > n:
        widths = [0] * (2 * x.rank)
        widths[2 * (x.rank - 1 - a) + 1] = length - n
        return x.pad(widths)
    return x


@op("DFT", host=(1, 2), since=17)
def dft(node: Node) -> Callable[..., Any]:
    """The discrete Fourier transform along one axis as two matrix products (the cos and
    sin of the angles, computed on the host): real or complex input (a last dim of 1 or 2),
    ``inverse``, ``onesided`` (the half spectrum, or from it the real signal), ``dft_length``."""
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    fixed = node.attr("axis", 1)  # an attribute before opset 20, an input since

    def run(x: Tensor, length: Any = None, axis_in: Any = None) -> Tensor:
        given = (
            int(scalar(axis_in)) if axis_in is not None and np.size(axis_in) else (-2 if node.version >= 20 else fixed)
        )
        a = given + x.rank if given < 0 else given
        if not 0 < a < x.rank - 1:
            raise node.error(f"axis {given} must name a signal dim (not the batch nor the last, complex, one)")
        re = x.narrow(x.rank - 1, 0, 1).squeeze_dim(x.rank - 1)
        im = x.narrow(x.rank - 1, 1, 1).squeeze_dim(x.rank - 1) if x.dims()[-1] == 2 else None
        size = int(scalar(length)) if length is not None and np.size(length) else x.dims()[a]
        if inverse and onesided:  # the real signal of length `size` from its half spectrum
            if length is None or not np.size(length):
                size = 2 * (x.dims()[a] - 1)  # as numpy's irfft
            half = size // 2 + 1
            re = _fit(re, a, half)
            im = _fit(im, a, half) if im is not None else None
            k, n = np.arange(half)[None, :], np.arange(size)[:, None]
            weight = np.where((k == 0) | ((size % 2 == 0) & (k == size // 2)), 1.0, 2.0) / size
            angle = 2 * np.pi * k * n / size
            out = _along(re, a, weight * np.cos(angle))
            if im is not None:
                out = out - _along(im, a, weight * np.sin(angle))
            return out.unsqueeze_dim(out.rank)
        re = _fit(re, a, size)
        im = _fit(im, a, size) if im is not None else None
        count = size // 2 + 1 if onesided else size
        k, n = np.arange(count)[:, None], np.arange(size)[None, :]
        angle = (1 if inverse else -1) * 2 * np.pi * k * n / size
        scale = 1.0 / size if inverse else 1.0
        cos, sin = np.cos(angle) * scale, np.sin(angle) * scale
        real, imag = _along(re, a, cos), _along(re, a, sin)
        if im is not None:
            real, imag = real - _along(im, a, sin), imag + _along(im, a, cos)
        return Tensor.stack([real, imag], real.rank)

    return run


@op("STFT", host=(1, 3), since=17)
def stft(node: Node) -> Callable[..., Any]:
    """The short-time Fourier transform: frames of ``frame_length`` every ``frame_step``
    samples (no padding), each multiplied by ``window`` and transformed as :func:`dft`
    does (two matrix products): ``[batch, frames, bins, 2]``."""
    onesided = bool(node.attr("onesided", 1))

    def run(x: Tensor, step: Any, window: Tensor | None = None, length: Any = None) -> Tensor:
        hop = int(scalar(step))
        size = int(scalar(length)) if length is not None and np.size(length) else None
        if window is not None:
            if size is not None and size != window.dims()[0]:
                raise node.error(f"frame_length {size} differs from the window's length {window.dims()[0]}")
            size = window.dims()[0]
        if size is None:
            raise node.error("needs a window or a frame_length")
        if x.rank != 3 or x.dims()[2] not in (1, 2):
            raise node.error(f"signal must be [batch, length, 1 or 2], got {x.dims()}")
        if hop < 1 or size > x.dims()[1]:
            raise node.error(f"frame_step {hop} and frame_length {size} do not fit a signal of {x.dims()[1]} samples")
        frames = (x.dims()[1] - size) // hop + 1
        parts = [x.narrow(2, i, 1).squeeze_dim(2) for i in range(x.dims()[2])]
        framed = [Tensor.stack([p.narrow(1, f * hop, size) for f in range(frames)], 1) for p in parts]
        if window is not None:
            w = window.cast(x.dtype).reshape([1, 1, size])
            framed = [f * w for f in framed]
        count = size // 2 + 1 if onesided else size
        k, n = np.arange(count)[:, None], np.arange(size)[None, :]
        angle = -2 * np.pi * k * n / size
        cos, sin = np.cos(angle), np.sin(angle)
        real, imag = _along(framed[0], 2, cos), _along(framed[0], 2, sin)
        if len(framed) == 2:
            real, imag = real - _along(framed[1], 2, sin), imag + _along(framed[1], 2, cos)
        return Tensor.stack([real, imag], 3)

    return run
