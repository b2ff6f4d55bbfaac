"""PyTorch's names for the weights of ``nn.LSTM``/``nn.GRU``/``nn.RNN`` and ember's.

PyTorch keeps one tensor per kind, layer and direction, its gates stacked along the
rows in PyTorch's gate order: ``weight_ih_l{k}`` ``[G * d_hidden, d_input]``,
``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}``, and ``..._reverse`` for the
backward direction. ember keeps a ``GateController`` per gate in each cell
(``cells.{2k + d}``); the split pieces keep PyTorch's ``[out, in]`` layout, which the
gates' ``Linear`` layers then transpose as for any PyTorch ``Linear``.
"""

from __future__ import annotations

import numpy as np

from ember.errors import RecordError

_KINDS = (("weight_ih", "input_transform.weight"), ("weight_hh", "hidden_transform.weight"))
_BIASES = (("bias_ih", "input_transform.bias"), ("bias_hh", "hidden_transform.bias"))


def _cells(num_layers: int, directions: int) -> list[tuple[int, str]]:
    """``(cell index, PyTorch's suffix)`` for every layer and direction."""
    return [
        (layer * directions + d, f"l{layer}" + ("_reverse" if d else ""))
        for layer in range(num_layers)
        for d in range(directions)
    ]


def split_torch_keys(
    prefix: str, arrays: dict[str, np.ndarray], gates: tuple[str, ...], num_layers: int, directions: int
) -> dict[str, np.ndarray]:
    """``arrays`` with PyTorch's stacked RNN tensors under ``prefix`` split into ember's
    per-gate keys (other keys untouched)."""
    out = dict(arrays)
    for index, suffix in _cells(num_layers, directions):
        for theirs, ours in _KINDS + _BIASES:
            key = f"{prefix}{theirs}_{suffix}"
            if key not in out:
                continue
            array = out.pop(key)
            if array.ndim == 0 or array.shape[0] % len(gates):
                raise RecordError(
                    f"ember: {key!r} has shape {list(array.shape)}: PyTorch stacks {len(gates)} gates "
                    f"({', '.join(gates)}) along its first axis, so it must be a multiple of {len(gates)}; "
                    "build the layer with the checkpoint's kind (Lstm, Gru, Rnn) and sizes"
                )
            for gate, piece in zip(gates, np.split(array, len(gates), axis=0)):
                out[f"{prefix}cells.{index}.{gate}.{ours}"] = piece
    return out


def join_torch_keys(
    prefix: str, arrays: dict[str, np.ndarray], gates: tuple[str, ...], num_layers: int, directions: int
) -> dict[str, np.ndarray]:
    """The inverse of :func:`split_torch_keys`."""
    out = dict(arrays)
    for index, suffix in _cells(num_layers, directions):
        for theirs, ours in _KINDS + _BIASES:
            parts = [f"{prefix}cells.{index}.{gate}.{ours}" for gate in gates]
            if all(p in out for p in parts):
                out[f"{prefix}{theirs}_{suffix}"] = np.concatenate([out.pop(p) for p in parts], axis=0)
    return out
