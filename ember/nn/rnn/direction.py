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
from ember.nn.rnn.checks import sequence_mask, step_masks
from ember.nn.rnn.functional import Activation, gru_layer, gru_scan, lstm_layer, lstm_scan, rnn_scan
from ember.tensor import Tensor

__all__ = ["gru_direction", "lstm_direction", "rnn_direction"]


_Scan = Callable[[list[Tensor], list[Tensor], list[Tensor] | None], tuple]
_Layer = Callable[[Tensor, list[Tensor], Tensor | None], tuple]


def _direction(
    name: str,
    gates: int,
    x: Any,
    w_ih: Tensor,
    w_hh: Tensor,
    states: list[tuple[str, Tensor | None]],
    lengths: Any,
    batch_first: bool,
    scan: _Scan,
    layer: _Layer | None = None,
) -> tuple[Tensor, ...]:
    """``(y, final states...)`` of one direction: the checks, then ``layer(x [seq, batch,
    d_input], initial states, valid [seq, batch, 1] or None)`` over the whole sequence
    (the fused path) where given, else ``scan(steps [batch, d_input], initial states,
    step masks [batch, 1] or None)``; ``y`` back in ``x``'s layout."""
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
    x = x.float()
    if layer is not None:
        y, *final = layer(x.swap_dims(0, 1) if batch_first else x, init, sequence_mask(name, lengths, batch, seq, x))
        return (y.swap_dims(0, 1) if batch_first else y, *final)
    masks = step_masks(name, lengths, batch, seq, True, x)
    if masks is not None:
        masks = [m.squeeze_dim(1) for m in masks]  # [batch, 1] for [batch, d_hidden] states
    outs, *final = scan([x.narrow(tdim, t, 1).squeeze_dim(tdim) for t in range(seq)], init, masks)
    return (Tensor.stack(outs, tdim), *final)


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
    ``peepholes``, each ``[d_hidden]``). Without those, the whole sequence is one fused
    call (:func:`~ember.nn.rnn.functional.lstm_layer`)."""
    size = w_hh.dims()[0] if isinstance(w_hh, Tensor) and w_hh.rank == 2 else None
    if peepholes is not None and (len(peepholes) != 3 or any(p.dims() != [size] for p in peepholes)):
        shapes = [p.dims() for p in peepholes]
        raise ShapeError(f"ember: lstm_direction: peepholes must be three [d_hidden={size}] tensors, got {shapes}")
    b_i, b_h = _bias(b_ih), _bias(b_hh)

    def scan(xs: list[Tensor], init: list[Tensor], masks: list[Tensor] | None) -> tuple:
        peep = None if peepholes is None else tuple(p.float() for p in peepholes)
        return lstm_scan(
            xs,
            w_ih,
            w_hh,
            b_i,
            b_h,
            *init,
            valid=masks,
            reverse=reverse,
            clip=clip,
            activations=activations,
            peepholes=peep,  # type: ignore[arg-type]
        )

    def layer(x: Tensor, init: list[Tensor], valid: Tensor | None) -> tuple:
        return lstm_layer(x, w_ih, w_hh, b_i, b_h, *init, valid=valid, reverse=reverse)

    fused = clip is None and activations is None and peepholes is None
    y, h, c = _direction(
        "lstm_direction",
        4,
        x,
        w_ih,
        w_hh,
        [("h0", h0), ("c0", c0)],
        lengths,
        batch_first,
        scan,
        layer if fused else None,
    )
    return y, h, c


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
    ``linear_before_reset=1``; see :func:`~ember.nn.rnn.functional.gru_scan`). In the
    ``reset_after`` form without ``clip`` or ``activations``, the whole sequence is one
    fused call (:func:`~ember.nn.rnn.functional.gru_layer`)."""
    b_i, b_h = _bias(b_ih), _bias(b_hh)

    def scan(xs: list[Tensor], init: list[Tensor], masks: list[Tensor] | None) -> tuple:
        return gru_scan(
            xs,
            w_ih,
            w_hh,
            b_i,
            b_h,
            *init,
            valid=masks,
            reverse=reverse,
            reset_after=reset_after,
            clip=clip,
            activations=activations,
        )

    def layer(x: Tensor, init: list[Tensor], valid: Tensor | None) -> tuple:
        return gru_layer(x, w_ih, w_hh, b_i, b_h, *init, valid=valid, reverse=reverse)

    fused = reset_after and clip is None and activations is None
    y, h = _direction(
        "gru_direction", 3, x, w_ih, w_hh, [("h0", h0)], lengths, batch_first, scan, layer if fused else None
    )
    return y, h


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

    def scan(xs: list[Tensor], init: list[Tensor], masks: list[Tensor] | None) -> tuple:
        return rnn_scan(
            xs,
            w_ih,
            w_hh,
            _bias(b_ih),
            _bias(b_hh),
            *init,
            valid=masks,
            reverse=reverse,
            nonlinearity=nonlinearity,
            clip=clip,
        )

    y, h = _direction("rnn_direction", 1, x, w_ih, w_hh, [("h0", h0)], lengths, batch_first, scan)
    return y, h
