"""The arrays a compiled step updates in place: parameters and moments packed into one
block per dtype (:func:`pack_contiguous`), and the arrays of arguments the caller gave
up (:func:`given`)."""

from __future__ import annotations

from typing import Any

import numpy as np


def pack_contiguous(arrays: list[Any]) -> list[Any]:
    """Copies of ``arrays`` as views into one block per dtype, each view starting on a
    64-byte boundary (what a compiled step binds: its parameters and optimizer moments
    then lie together in memory). Arrays that are not distinct C-contiguous numpy
    arrays are returned as they are (the binding refuses them)."""
    if len({id(a) for a in arrays}) != len(arrays) or not all(
        type(a) is np.ndarray and a.flags.c_contiguous for a in arrays
    ):
        return arrays
    out: list[Any] = list(arrays)
    groups: dict[np.dtype, list[int]] = {}
    for n, a in enumerate(arrays):
        groups.setdefault(a.dtype, []).append(n)
    for dtype, members in groups.items():
        step = max(1, 64 // dtype.itemsize)
        offsets, total = [], 0
        for n in members:
            offsets.append(total)
            total += -(-arrays[n].size // step) * step
        raw = np.empty(total * dtype.itemsize + 64, np.uint8)
        start = -raw.ctypes.data % 64
        block = raw[start : start + total * dtype.itemsize].view(dtype)
        for n, offset in zip(members, offsets):
            view = block[offset : offset + arrays[n].size].reshape(arrays[n].shape)
            view[...] = arrays[n]
            out[n] = view
    return out


def given(arrays: list[Any]) -> list[Any]:
    """The arrays of given-up arguments (``compile(donate=...)``) as a plan may write
    them in place: a copy of one that is not a writable C-contiguous numpy array, or
    whose memory (its base array's) another of them holds too."""
    seen: set[int] = set()
    out = []
    for a in arrays:
        owner = id(a if type(a) is not np.ndarray or a.base is None else a.base)
        if type(a) is not np.ndarray or not a.flags.c_contiguous or not a.flags.writeable or owner in seen:
            a = np.array(a, order="C", copy=True)
            owner = id(a)
        seen.add(owner)
        out.append(a)
    return out
