"""One direction of one recurrent layer over a whole sequence, from fused weights: the
entry point for front ends that bring their own weights (an ONNX importer maps
``LSTM``/``GRU``/``RNN`` nodes onto these, one call per direction, after reordering the
gates into PyTorch's order and transposing ``W``/``R`` to ``[in, G * hidden]``).

``x`` is ``[seq, batch, d_input]`` (``[batch, seq, d_input]`` with ``batch_first``); the
result is ``(y, final states)``, ``y`` in the same layout with ``d_hidden`` features
(zeros at padded steps) and each state ``[batch, d_hidden]``. ``lengths`` (one per batch
element, in ``[1, seq]``; ONNX's ``sequence_lens``) and ``reverse`` behave as in
:class:`~ember.nn.Lstm`.

>>> from ember import Tensor
>>> w_ih, w_hh = Tensor.ones([3, 8]).mul_scalar(0.1), Tensor.zeros([2, 8])
>>> y, h, c = lstm_direction(Tensor.ones([4, 5, 3]), w_ih, w_hh, lengths=[4, 2, 1, 3, 4], reverse=True)
>>> y.dims(), h.dims()
([4, 5, 2], [5, 2])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.errors import ShapeError
from ember.nn.rnn.checks import step_masks
from ember.nn.rnn.functional import Activation, gru_scan, lstm_scan, rnn_scan
from ember.tensor import Tensor

__all__ = ["gru_direction", "lstm_direction", "rnn_direction"]


def _prepare(
    name: str,
    gates: int,
    x: Any,
    w_ih: Tensor,
    w_hh: Tensor,
    states: list[tuple[str, Tensor | None]],
    lengths: Any,
    batch_first: bool,
) -> tuple[list[Tensor], list[Tensor], list[Tensor] | None, int]:
    """The steps ``[batch, d_input]``, the initial states, the step masks and ``tdim``."""
    if not isinstance(x, Tensor) or x.rank != 3:
        shape = x.dims() if isinstance(x, Tensor) else type(x).__name__
        layout = "[batch, seq, d_input]" if batch_first else "[seq, batch, d_input]"
        raise ShapeError(f"ember: {name}: x must be {layout}, got {shape}")
    tdim = 1 if batch_first else 0
    batch, seq, d_input = x.dims()[1 - tdim], x.dims()[tdim], x.dims()[2]
    if w_hh.rank != 2 or w_hh.dims()[1] % gates or w_hh.dims()[1] != gates * w_hh.dims()[0]:
        raise ShapeError(
            f"ember: {name}: w_hh must be [d_hidden, {gates} * d_hidden] (ember's [in, out] layout, gates in "
            f"PyTorch's order), got {w_hh.dims()}"
        )
    size = w_hh.dims()[0]
    if w_ih.dims() != [d_input, gates * size]:
        raise ShapeError(
            f"ember: {name}: w_ih must be [d_input={d_input}, {gates} * d_hidden={gates * size}], got {w_ih.dims()}"
        )
    init = []
    for label, t in states:
        if t is None:
            t = Tensor.zeros([batch, size], device=x.device)
        elif not isinstance(t, Tensor) or t.dims() != [batch, size]:
            shape = t.dims() if isinstance(t, Tensor) else type(t).__name__
            raise ShapeError(f"ember: {name}: {label} must be [batch={batch}, d_hidden={size}], got {shape}")
        init.append(t.float())
    masks = step_masks(name, lengths, batch, seq, True, x)
    if masks is not None:
        masks = [m.squeeze_dim(1) for m in masks]  # [batch, 1] for [batch, d_hidden] states
    xs = [x.float().narrow(tdim, t, 1).squeeze_dim(tdim) for t in range(seq)]
    return xs, init, masks, tdim


def _bias(b: Tensor | None) -> Tensor | None:
    return None if b is None else b.float()


def lstm_direction(
    x: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
    h0: Tensor | None = None,
    c0: Tensor | None = None,
    *,
    lengths: Any = None,
    reverse: bool = False,
    batch_first: bool = False,
    clip: float | None = None,
    activations: tuple[Activation, Activation, Activation] | None = None,
    peepholes: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """An LSTM direction over ``x``: ``(y, h, c)`` (gates ``i, f, g, o``; see
    :func:`~ember.nn.rnn.functional.lstm_scan` for ``clip``, ``activations`` and
    ``peepholes``, each ``[d_hidden]``)."""
    xs, (h, c), masks, tdim = _prepare(
        "lstm_direction", 4, x, w_ih, w_hh, [("h0", h0), ("c0", c0)], lengths, batch_first
    )
    size = w_hh.dims()[0]
    if peepholes is not None and (len(peepholes) != 3 or any(p.dims() != [size] for p in peepholes)):
        shapes = [p.dims() for p in peepholes]
        raise ShapeError(f"ember: lstm_direction: peepholes must be three [d_hidden={size}] tensors, got {shapes}")
    outs, h, c = lstm_scan(
        xs,
        w_ih,
        w_hh,
        _bias(b_ih),
        _bias(b_hh),
        h,
        c,
        valid=masks,
        reverse=reverse,
        clip=clip,
        activations=activations,
        peepholes=None if peepholes is None else (peepholes[0].float(), peepholes[1].float(), peepholes[2].float()),
    )
    return Tensor.stack(outs, tdim), h, c


def gru_direction(
    x: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
    h0: Tensor | None = None,
    *,
    lengths: Any = None,
    reverse: bool = False,
    batch_first: bool = False,
    reset_after: bool = True,
    clip: float | None = None,
    activations: tuple[Activation, Activation] | None = None,
) -> tuple[Tensor, Tensor]:
    """A GRU direction over ``x``: ``(y, h)`` (gates ``r, z, n``; ``reset_after`` is ONNX's
    ``linear_before_reset=1``; see :func:`~ember.nn.rnn.functional.gru_scan`)."""
    xs, (h,), masks, tdim = _prepare("gru_direction", 3, x, w_ih, w_hh, [("h0", h0)], lengths, batch_first)
    outs, h = gru_scan(
        xs,
        w_ih,
        w_hh,
        _bias(b_ih),
        _bias(b_hh),
        h,
        valid=masks,
        reverse=reverse,
        reset_after=reset_after,
        clip=clip,
        activations=activations,
    )
    return Tensor.stack(outs, tdim), h


def rnn_direction(
    x: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
    h0: Tensor | None = None,
    *,
    lengths: Any = None,
    reverse: bool = False,
    batch_first: bool = False,
    nonlinearity: str | Callable[[Tensor], Tensor] = "tanh",
    clip: float | None = None,
) -> tuple[Tensor, Tensor]:
    """An Elman RNN direction over ``x``: ``(y, h)`` (see :func:`~ember.nn.rnn.functional.rnn_scan`)."""
    xs, (h,), masks, tdim = _prepare("rnn_direction", 1, x, w_ih, w_hh, [("h0", h0)], lengths, batch_first)
    outs, h = rnn_scan(
        xs, w_ih, w_hh, _bias(b_ih), _bias(b_hh), h, valid=masks, reverse=reverse, nonlinearity=nonlinearity, clip=clip
    )
    return Tensor.stack(outs, tdim), h
