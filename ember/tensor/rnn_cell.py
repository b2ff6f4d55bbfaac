"""The fused recurrent cells: one state update from the gates' pre-activations.

:func:`lstm_cell` and :func:`gru_cell` are what :func:`ember.nn.rnn.functional.lstm_scan`
and :func:`~ember.nn.rnn.functional.gru_scan` run at each step:
the backend's kernel where it has one (flex: one call forward and one backward per
step), else the composite (:mod:`ember.backend.composites.rnn`), differentiated op by op.

>>> from ember import Tensor
>>> h, c = lstm_cell(Tensor.zeros([1, 8]), Tensor.ones([1, 2]))
>>> [round(v, 4) for v in h.tolist()[0]], c.tolist()
([0.2311, 0.2311], [[0.5, 0.5]])
"""

from __future__ import annotations

from ember.backend.ops import FusedOp
from ember.errors import DeviceError, ShapeError
from ember.tensor.fused import fused
from ember.tensor.tensor import Tensor

__all__ = ["gru_cell", "lstm_cell"]


def lstm_cell(gates: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """One LSTM step's ``(h', c')`` from the gates' pre-activations ``gates`` ``[..., 4H]``
    (``x W_ih + b_ih + h W_hh + b_hh``, gates in PyTorch's order: input, forget, cell,
    output) and the cell state ``c`` ``[..., H]`` (same leading dims):
    ``c' = sigmoid(f) * c + sigmoid(i) * tanh(g)``, ``h' = sigmoid(o) * tanh(c')``."""
    gd, cd = gates.dims(), c.dims()
    if len(gd) != len(cd) or gd[:-1] != cd[:-1] or gd[-1] != 4 * cd[-1]:
        raise ShapeError(
            f"ember: lstm_cell: gates must be [..., 4 * H] and c [..., H] with the same leading dims, "
            f"got gates {gd} and c {cd}"
        )
    if c.device != gates.device:
        raise DeviceError(
            f"ember: lstm_cell: gates are on {gates.device!r} and c on {c.device!r}; move one with to_device"
        )
    h, c_new = fused(FusedOp.LSTM_CELL, gates.device, gates.primitive, c.primitive)
    return Tensor(h, gates.device), Tensor(c_new, gates.device)


def gru_cell(xp: Tensor, hp: Tensor, h: Tensor) -> Tensor:
    """One GRU step's ``h'`` (PyTorch's ``nn.GRUCell``, ``reset_after``) from the input
    projection ``xp = x W_ih + b_ih``, the hidden projection ``hp = h W_hh + b_hh`` (each
    ``[..., 3H]``, gates in PyTorch's order: reset, update, new) and the state ``h``
    ``[..., H]`` (same leading dims): ``r, z = sigmoid(xp + hp)``, ``n = tanh(xp_n + r *
    hp_n)``, ``h' = (1 - z) * n + z * h``.

    >>> from ember import Tensor
    >>> gru_cell(Tensor.zeros([1, 6]), Tensor.zeros([1, 6]), Tensor.ones([1, 2])).tolist()
    [[0.5, 0.5]]
    """
    xd, hpd, hd = xp.dims(), hp.dims(), h.dims()
    if xd != hpd or len(xd) != len(hd) or xd[:-1] != hd[:-1] or xd[-1] != 3 * hd[-1]:
        raise ShapeError(
            f"ember: gru_cell: xp and hp must be [..., 3 * H] and h [..., H] with the same leading dims, "
            f"got xp {xd}, hp {hpd} and h {hd}"
        )
    if not xp.device == hp.device == h.device:
        raise DeviceError(
            f"ember: gru_cell: xp, hp and h are on {xp.device!r}, {hp.device!r} and {h.device!r}; "
            "move them to one device with to_device"
        )
    return Tensor(fused(FusedOp.GRU_CELL, xp.device, xp.primitive, hp.primitive, h.primitive), xp.device)
