"""PyTorch's names for the weights of ``nn.LSTM``/``nn.GRU``/``nn.RNN`` (and their
``...Cell``s) and ember's.

PyTorch keeps one tensor per kind, its gates stacked along the rows in PyTorch's gate
order: ``weight_ih`` ``[G * d_hidden, d_input]``, ``weight_hh``, ``bias_ih``, ``bias_hh``
in a cell (``nn.LSTMCell``), and ``weight_ih_l{k}`` (``..._l{k}_reverse`` for the
backward direction) in a stack. ember keeps a ``GateController`` per gate in each cell,
and a stack's cells in a list (``cells.{num_directions * k + d}``). Loading, the stack
renames its keys to its cells' (:func:`rename_stack_keys`, run first: the parent adapts
before its sub-layers), then each cell splits its tensors into its gates
(:func:`split_cell_keys`); the pieces keep PyTorch's ``[out, in]`` layout, which the gates'
``Linear`` layers then transpose as for any PyTorch ``Linear``. Export runs the inverses
in the opposite order.
"""

from __future__ import annotations

import numpy as np

from ember.errors import RecordError

KINDS = (
    ("weight_ih", "input_transform.weight"),
    ("weight_hh", "hidden_transform.weight"),
    ("bias_ih", "input_transform.bias"),
    ("bias_hh", "hidden_transform.bias"),
)


def check_stacked(key: str, array: np.ndarray, gates: tuple[str, ...]) -> None:
    """A ``RecordError`` naming ``key`` unless ``array`` stacks ``len(gates)`` gates."""
    if array.ndim == 0 or array.shape[0] % len(gates):
        raise RecordError(
            f"ember: {key!r} has shape {list(array.shape)}: PyTorch stacks {len(gates)} gates "
            f"({', '.join(gates)}) along its first axis, so its first size must be a multiple of "
            f"{len(gates)}; build the layer with the checkpoint's kind (Lstm, Gru, Rnn) and sizes"
        )


def split_cell_keys(prefix: str, arrays: dict[str, np.ndarray], gates: tuple[str, ...]) -> dict[str, np.ndarray]:
    """``arrays`` with a cell's stacked tensors under ``prefix`` split into its gates'
    keys (other keys untouched)."""
    out = dict(arrays)
    for theirs, ours in KINDS:
        key = prefix + theirs
        if key not in out:
            continue
        array = out.pop(key)
        check_stacked(key, array, gates)
        for gate, piece in zip(gates, np.split(array, len(gates), axis=0)):
            out[f"{prefix}{gate}.{ours}"] = piece
    return out


def join_cell_keys(prefix: str, arrays: dict[str, np.ndarray], gates: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The inverse of :func:`split_cell_keys`."""
    out = dict(arrays)
    for theirs, ours in KINDS:
        parts = [f"{prefix}{gate}.{ours}" for gate in gates]
        if all(p in out for p in parts):
            out[prefix + theirs] = np.concatenate([out.pop(p) for p in parts], axis=0)
    return out


def _names(prefix: str, num_layers: int, directions: int) -> list[tuple[str, str]]:
    """``(PyTorch's key, ember's key)`` of every tensor of a stack."""
    pairs = []
    for layer in range(num_layers):
        for d in range(directions):
            suffix = f"_l{layer}" + ("_reverse" if d else "")
            for kind, _ in KINDS:
                pairs.append((f"{prefix}{kind}{suffix}", f"{prefix}cells.{layer * directions + d}.{kind}"))
    return pairs


def rename_stack_keys(
    prefix: str,
    arrays: dict[str, np.ndarray],
    gates: tuple[str, ...],
    num_layers: int,
    directions: int,
    to_ember: bool,
) -> dict[str, np.ndarray]:
    """A stack's keys from PyTorch's names to its cells' (``to_ember``; each tensor checked
    to stack ``gates``) or back."""
    out = dict(arrays)
    for theirs, ours in _names(prefix, num_layers, directions):
        src, dst = (theirs, ours) if to_ember else (ours, theirs)
        if src in out and dst not in out:
            if to_ember:
                check_stacked(src, out[src], gates)
            out[dst] = out.pop(src)
    return out
