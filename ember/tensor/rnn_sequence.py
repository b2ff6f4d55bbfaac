"""The fused recurrent sequences: one LSTM or GRU direction over all steps in one call.

:func:`lstm_sequence` and :func:`gru_sequence` take the input projection of every step
(``x W_ih + b``, computed for the whole sequence in one GEMM) and run the recurrence:
the backend's kernel where it has one (flex: the whole loop in one call forward and
one backward, ``ember.compile``: one library call of the plan), else the composite
(:mod:`ember.backend.composites.rnn_sequence`), a loop of per-step ops. Layouts are
time-major: ``[seq, batch, features]``.

>>> from ember import Tensor
>>> y, h, c = lstm_sequence(Tensor.zeros([3, 1, 8]), Tensor.zeros([2, 8]), Tensor.zeros([1, 2]), Tensor.ones([1, 2]))
>>> y.dims(), c.tolist()
([3, 1, 2], [[0.125, 0.125]])
"""

from __future__ import annotations

from ember.backend.dtype import DType
from ember.backend.ops import FusedOp
from ember.errors import DeviceError, ShapeError
from ember.tensor.fused import fused
from ember.tensor.tensor import Tensor

__all__ = ["gru_sequence", "lstm_sequence"]


def _check(name: str, gates: int, proj: Tensor, w_hh: Tensor, states: list[Tensor], valid: Tensor | None) -> None:
    pd, wd = proj.dims(), w_hh.dims()
    if len(pd) != 3 or len(wd) != 2 or wd[1] != gates * wd[0] or pd[2] != wd[1]:
        raise ShapeError(
            f"ember: {name}: proj must be [seq, batch, {gates} * H] and w_hh [H, {gates} * H], "
            f"got proj {pd} and w_hh {wd}"
        )
    for s in states:
        if s.dims() != [pd[1], wd[0]]:
            raise ShapeError(f"ember: {name}: each initial state must be [batch={pd[1]}, H={wd[0]}], got {s.dims()}")
    if valid is not None and (valid.dims() != [pd[0], pd[1], 1] or valid.dtype != DType.BOOL):
        raise ShapeError(
            f"ember: {name}: valid must be a bool [seq={pd[0]}, batch={pd[1]}, 1] mask, got {valid.dims()} "
            f"{valid.dtype.name}"
        )
    others = [w_hh, *states] + ([] if valid is None else [valid])
    if any(t.device != proj.device for t in others):
        raise DeviceError(f"ember: {name}: all tensors must be on {proj.device!r}; move them with to_device")


def lstm_sequence(
    proj: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, valid: Tensor | None = None, reverse: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """An LSTM direction: ``(y [seq, batch, H], h_n, c_n)`` from the input projections
    ``proj`` ``[seq, batch, 4H]`` (``x W_ih + b_ih + b_hh``, gates in PyTorch's order),
    ``w_hh`` ``[H, 4H]`` (``[in, out]``) and the initial states ``[batch, H]``. Per step
    ``z = proj[t] + h w_hh``, then :func:`~ember.tensor.rnn_cell.lstm_cell`. ``valid``
    (bool ``[seq, batch, 1]``): where false, the step keeps the states and outputs zero.
    ``reverse`` runs the steps from last to first."""
    _check("lstm_sequence", 4, proj, w_hh, [h0, c0], valid)
    args = (proj, w_hh, h0, c0)
    out = fused(FusedOp.LSTM_SEQUENCE, proj.device, *(a.primitive for a in args), _prim(valid), reverse)
    return Tensor(out[0], proj.device), Tensor(out[1], proj.device), Tensor(out[2], proj.device)


def gru_sequence(
    proj: Tensor,
    w_hh: Tensor,
    b_hh: Tensor | None,
    h0: Tensor,
    valid: Tensor | None = None,
    reverse: bool = False,
) -> tuple[Tensor, Tensor]:
    """A GRU direction (PyTorch's ``reset_after`` form): ``(y [seq, batch, H], h_n)`` from
    ``proj`` ``[seq, batch, 3H]`` (``x W_ih + b_ih``; reset, update, new), ``w_hh``
    ``[H, 3H]``, ``b_hh`` ``[3H]`` (or ``None``) and ``h0`` ``[batch, H]``; per step
    :func:`~ember.tensor.rnn_cell.gru_cell` of ``(proj[t], h w_hh + b_hh, h)``.
    ``valid`` and ``reverse`` as :func:`lstm_sequence`."""
    _check("gru_sequence", 3, proj, w_hh, [h0], valid)
    if b_hh is not None and b_hh.dims() != [w_hh.dims()[1]]:
        raise ShapeError(f"ember: gru_sequence: b_hh must be [{w_hh.dims()[1]}], got {b_hh.dims()}")
    out = fused(
        FusedOp.GRU_SEQUENCE,
        proj.device,
        proj.primitive,
        w_hh.primitive,
        _prim(b_hh),
        h0.primitive,
        _prim(valid),
        reverse,
    )
    return Tensor(out[0], proj.device), Tensor(out[1], proj.device)


def _prim(t: Tensor | None):
    return None if t is None else t.primitive
