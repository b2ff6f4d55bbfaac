"""The argument checks of the recurrent layers: the sequence, the lengths of its
sequences, and the initial states, each with an error that names what to pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor import Tensor


def check_sequence(name: str, x: Any, d_input: int, batch_first: bool) -> Tensor:
    """``x`` as a float tensor, checked to be ``[batch, seq, d_input]`` (``[seq, batch,
    d_input]`` unless ``batch_first``) with at least one step."""
    layout = "[batch, seq, d_input]" if batch_first else "[seq, batch, d_input]"
    if not isinstance(x, Tensor) or x.rank != 3 or x.dims()[2] != d_input:
        shape = x.dims() if isinstance(x, Tensor) else type(x).__name__
        hint = " (one step of a cell takes [batch, d_input])" if isinstance(x, Tensor) and x.rank == 2 else ""
        raise ShapeError(f"ember: {name}: the input must be {layout} with d_input={d_input}, got {shape}{hint}")
    if x.dims()[1 if batch_first else 0] == 0:
        raise ShapeError(f"ember: {name}: the input {layout} has no steps (seq=0), got {x.dims()}")
    return x.float()


def lengths_of(name: str, lengths: Any, batch: int, seq: int) -> np.ndarray:
    """``lengths`` (an int tensor, array or list, one per batch element) as an int64
    array, checked to lie in ``[1, seq]``."""
    values = lengths.to_numpy() if isinstance(lengths, Tensor) else np.asarray(lengths)
    if values.dtype.kind not in "iu" and not (values.dtype.kind == "f" and np.all(values == np.round(values))):
        raise DTypeError(f"ember: {name}: lengths must be integers (one per batch element), got dtype {values.dtype}")
    if values.shape != (batch,):
        raise ShapeError(
            f"ember: {name}: lengths must hold one length per batch element ([{batch}]), got shape {list(values.shape)}"
        )
    values = values.astype(np.int64)
    if values.size and (values.min() < 1 or values.max() > seq):
        raise ValueRangeError(
            f"ember: {name}: every length must lie in [1, seq={seq}], got {values.tolist()}; "
            "drop empty sequences from the batch, or pad the input to the longest length"
        )
    return values


def step_masks(name: str, lengths: Any, batch: int, seq: int, batch_first: bool, like: Tensor) -> list[Tensor] | None:
    """One bool tensor per step, ``[batch, 1, 1]`` (``[1, batch, 1]`` unless
    ``batch_first``), true where the step is within its sequence's length; ``None`` when
    every sequence fills all ``seq`` steps."""
    if lengths is None:
        return None
    values = lengths_of(name, lengths, batch, seq)
    if np.all(values == seq):
        return None
    valid = np.arange(seq)[:, None] < values[None, :]
    shape = [batch, 1, 1] if batch_first else [1, batch, 1]
    return [Tensor.from_data(valid[t].reshape(shape), device=like.device) for t in range(seq)]


def sequence_mask(name: str, lengths: Any, batch: int, seq: int, like: Tensor) -> Tensor | None:
    """A bool ``[seq, batch, 1]`` tensor, true where the step is within its sequence's
    length; ``None`` when every sequence fills all ``seq`` steps."""
    if lengths is None:
        return None
    values = lengths_of(name, lengths, batch, seq)
    if np.all(values == seq):
        return None
    valid = np.arange(seq)[:, None] < values[None, :]
    return Tensor.from_data(valid[:, :, None], device=like.device)


def initial_states(
    name: str,
    given: Sequence[tuple[str, Any]],
    n_cells: int,
    batch: int,
    size: int,
    batch_first: bool,
    like: Tensor,
) -> tuple[list[tuple[Tensor, ...]], bool]:
    """Each cell's initial states (``[batch, 1, d_hidden]``, or ``[1, batch, d_hidden]``
    unless ``batch_first``) from ``given`` ``(name, tensor or None)`` pairs, each tensor
    ``[n_cells, batch, d_hidden]`` (PyTorch's layout) or, for one cell, ``[batch, d_hidden]``
    (Burn's); and whether they were given 2-D (so that the final states come back 2-D)."""
    tdim = 1 if batch_first else 0
    zeros = Tensor.zeros([batch, 1, size] if batch_first else [1, batch, size], device=like.device)
    per_kind: list[list[Tensor]] = []
    two_d = False
    for label, t in given:
        if t is None:
            per_kind.append([zeros] * n_cells)
            continue
        dims = t.dims() if isinstance(t, Tensor) else None
        if dims == [batch, size] and n_cells == 1:
            two_d = True
            per_kind.append([t.float().unsqueeze_dim(tdim)])
            continue
        if dims != [n_cells, batch, size]:
            shape = dims if dims is not None else type(t).__name__
            raise ShapeError(
                f"ember: {name}: {label} must be [num_layers * num_directions={n_cells}, batch={batch}, "
                f"d_hidden={size}], got {shape}"
            )
        t = t.float()
        parts = [t.narrow(0, k, 1) for k in range(n_cells)]
        per_kind.append([p.swap_dims(0, 1) if batch_first else p for p in parts])
    return [tuple(kind[k] for kind in per_kind) for k in range(n_cells)], two_d


def final_state(parts: Sequence[Tensor], batch_first: bool, two_d: bool) -> Tensor:
    """The cells' last states (as :func:`initial_states` lays them out) as PyTorch's
    ``[n_cells, batch, d_hidden]`` (``[batch, d_hidden]`` with ``two_d``)."""
    tdim = 1 if batch_first else 0
    if two_d:
        return parts[0].squeeze_dim(tdim)
    rows = [p.swap_dims(0, 1) if batch_first else p for p in parts]
    return rows[0] if len(rows) == 1 else Tensor.cat(rows, 0)
