"""The short-time Fourier transform and its inverse, as ``torch.stft``/``torch.istft``.

``stft`` frames the signal (``[L]`` or ``[B, L]``) every ``hop_length`` samples into
``n_fft``-point frames (after padding ``n_fft // 2`` on each side with ``pad_mode`` when
``center``), multiplies each by the window (``win_length`` points, zero-padded to
``n_fft`` in the middle; ones by default) and takes its FFT: ``[(B,) n_fft // 2 + 1,
frames]`` complex (all ``n_fft`` bins when ``onesided=False``). ``istft`` inverts it
by overlap-add divided by the summed squared window (it needs the window's overlaps
to cover every sample, the NOLA condition). The framing and window are the fused op
``FusedOp.STFT_FRAMES`` (flex: one strided view of the padded signal times the window;
elsewhere its composite in :mod:`ember.backend.composites.spectral`, slices and one
``cat``), then one FFT over the frames; ``istft`` is
a composite of the FFTs of ``ember.fft`` and ``scatter``. Gradients flow through both.

>>> import ember
>>> from ember import Tensor
>>> x = Tensor.from_floats([float(i % 7) for i in range(64)])
>>> spec = ember.stft(x, n_fft=16, hop_length=4, window=ember.hann_window(16))
>>> spec.shape, spec.dtype
(Shape([9, 17]), DType.COMPLEX64)
>>> y = ember.istft(spec, n_fft=16, hop_length=4, window=ember.hann_window(16), length=64)
>>> bool((y - x).abs().max().item() < 1e-5)
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.backend.ops import FusedOp
from ember.errors import DeviceError, DTypeError, ShapeError, ValueRangeError
from ember.tensor import fft as _fft
from ember.tensor.fused import fused
from ember.tensor.tensor import Tensor

_PAD_MODES = ("reflect", "constant", "replicate", "circular")


def _ints(name: str, n_fft: Any, hop_length: Any, win_length: Any) -> tuple[int, int, int]:
    if isinstance(n_fft, bool) or not isinstance(n_fft, (int, np.integer)) or n_fft < 1:
        raise ValueRangeError(f"ember: {name}: n_fft must be an int >= 1, got {n_fft!r}")
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    if isinstance(hop, bool) or not isinstance(hop, (int, np.integer)) or hop < 1:
        raise ValueRangeError(f"ember: {name}: hop_length must be an int >= 1, got {hop_length!r}")
    if isinstance(win, bool) or not isinstance(win, (int, np.integer)) or not 1 <= win <= n_fft:
        raise ValueRangeError(f"ember: {name}: win_length must be an int in [1, n_fft={n_fft}], got {win_length!r}")
    return int(n_fft), int(hop), int(win)


def _window(name: str, window: Tensor | None, n_fft: int, win: int, like: Tensor) -> Tensor | None:
    """The window padded to ``n_fft`` (centred), or ``None`` for the rectangular one."""
    if window is None:
        if win == n_fft:
            return None
        ones = Tensor.ones([win], device=like.device, dtype=like.dtype.to_real())
        return ones.pad(((n_fft - win) // 2, n_fft - win - (n_fft - win) // 2))
    if not isinstance(window, Tensor) or window.rank != 1 or window.shape[0] != win:
        shape = list(window.shape) if isinstance(window, Tensor) else type(window).__name__
        raise ShapeError(f"ember: {name}: window must be a 1-d tensor of win_length={win} points, got {shape}")
    if window.device != like.device:
        if window.device.inner() != like.device.inner():
            raise DeviceError(
                f"ember: {name}: the window lives on {window.device!r}, the input on {like.device!r}; "
                "make the window on the input's device (e.g. hann_window(n, device=x.device))"
            )
        window = window.to_device(like.device)  # a device and its autodiff wrapper: the same values
    left = (n_fft - win) // 2
    return window.pad((left, n_fft - win - left)) if win != n_fft else window


def stft(
    input: Tensor,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Tensor | None = None,
    center: bool = True,
    pad_mode: str = "reflect",
    normalized: bool = False,
    onesided: bool | None = None,
    return_complex: bool | None = True,
) -> Tensor:
    """The STFT of ``input`` ``[L]`` or ``[B, L]`` (``torch.stft``; see the module docstring).
    ``normalized`` multiplies by ``n_fft ** -0.5``; ``return_complex=False`` gives the
    real view ``[..., 2]``."""
    n_fft, hop, win = _ints("stft", n_fft, hop_length, win_length)
    if not isinstance(input, Tensor) or input.rank not in (1, 2):
        shape = list(input.shape) if isinstance(input, Tensor) else type(input).__name__
        raise ShapeError(f"ember: stft: input must be a tensor [L] or [B, L], got {shape}")
    if pad_mode not in _PAD_MODES:
        raise ValueRangeError(f"ember: stft: pad_mode must be one of {', '.join(_PAD_MODES)}, got {pad_mode!r}")
    x = input
    if not (x.is_complex() or x.is_float()) or x.dtype in (DType.FLOAT16, DType.BFLOAT16):
        x = x.cast(DType.FLOAT32)
    pad = n_fft // 2 if center else 0
    length = x.shape[-1]
    if pad_mode == "reflect" and pad >= length:
        raise ShapeError(
            f"ember: stft: reflect padding of {pad} needs a signal longer than that, got {length} samples; "
            "use pad_mode='constant' or a longer signal"
        )
    if pad and pad_mode == "constant":
        x, length, pad = x.pad((pad, pad)), length + 2 * pad, 0
    if length + 2 * pad < n_fft:
        raise ShapeError(f"ember: stft: the (padded) signal has {length + 2 * pad} samples, fewer than n_fft={n_fft}")
    w = _window("stft", window, n_fft, win, x)
    frames = Tensor(
        fused(
            FusedOp.STFT_FRAMES, x.device, x._primitive, None if w is None else w._primitive, n_fft, hop, pad, pad_mode
        ),
        x.device,
    )
    onesided = (not x.is_complex() and (w is None or not w.is_complex())) if onesided is None else onesided
    if onesided and frames.is_complex():
        raise DTypeError("ember: stft: onesided=True needs a real input and window; pass onesided=False")
    norm = "ortho" if normalized else "backward"
    spec = _fft.rfft(frames, norm=norm) if onesided else _fft.fft(frames, norm=norm)
    spec = spec.swap_dims(-1, -2)
    if return_complex is False:
        from ember.tensor.ops.complex import view_as_real

        return view_as_real(spec)
    return spec


def istft(
    input: Tensor,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Tensor | None = None,
    center: bool = True,
    normalized: bool = False,
    onesided: bool | None = None,
    length: int | None = None,
    return_complex: bool = False,
) -> Tensor:
    """The inverse of :func:`stft` (``torch.istft``): ``input`` ``[(B,) n_freq, frames]``
    complex; overlap-add normalised by the summed squared window; ``length`` trims or
    zero-pads the result."""
    n_fft, hop, win = _ints("istft", n_fft, hop_length, win_length)
    if not isinstance(input, Tensor) or input.rank not in (2, 3) or not input.is_complex():
        desc = f"{list(input.shape)} {input.dtype}" if isinstance(input, Tensor) else type(input).__name__
        raise ShapeError(
            f"ember: istft: input must be a complex tensor [n_freq, frames] or [B, n_freq, frames], got {desc}"
        )
    onesided = input.shape[-2] != n_fft if onesided is None else onesided
    expected = n_fft // 2 + 1 if onesided else n_fft
    if input.shape[-2] != expected:
        raise ShapeError(
            f"ember: istft: expected {expected} frequency bins for n_fft={n_fft} (onesided={onesided}), "
            f"got {input.shape[-2]} (shape {list(input.shape)})"
        )
    device, rdtype = input.device, input.dtype.to_real()
    norm = "ortho" if normalized else "backward"
    spec = input.swap_dims(-1, -2)  # [..., frames, n_freq]
    if onesided:
        frames = _fft.irfft(spec, n=n_fft, norm=norm)
    else:
        frames = _fft.ifft(spec, n=n_fft, norm=norm)
        frames = frames if return_complex else frames.real()
    w = _window("istft", window, n_fft, win, input)
    if w is None:
        w = Tensor.ones([n_fft], device=device, dtype=rdtype)
    frames = frames.mul(w)
    n_frames = frames.shape[-2]
    total = n_fft + hop * (n_frames - 1)
    index = (np.arange(n_frames)[:, None] * hop + np.arange(n_fft)[None, :]).reshape(-1)
    lead = list(frames.shape[:-2])
    flat = frames.reshape(lead + [n_frames * n_fft])
    idx = Tensor.from_data(np.broadcast_to(index, tuple(lead) + index.shape).copy(), device=device)
    y = Tensor.zeros(lead + [total], device=device, dtype=flat.dtype).scatter(-1, idx, flat, "add")
    envelope = np.zeros(total)
    w2 = w.to_numpy().astype(np.float64) ** 2
    np.add.at(envelope, index, np.tile(w2, n_frames))
    start = n_fft // 2 if center else 0
    end = total - (n_fft // 2 if center else 0) if length is None else min(total, start + length)
    if envelope[start:end].size and np.abs(envelope[start:end]).min() < 1e-11:
        raise ValueRangeError(
            "ember: istft: the window's overlaps leave samples uncovered (the squared windows sum to ~0 there: "
            "the NOLA condition fails); use a smaller hop_length or a window without zeros at its ends"
        )
    y = y.narrow(-1, start, end - start)
    env = Tensor.from_data(envelope[start:end].astype(rdtype.np), device=device)
    y = y.div(env)
    if length is not None and length > end - start:
        y = y.pad((0, length - (end - start)))
    return y


__all__ = ["istft", "stft"]
