"""The generators of many items at once: numpy's
``Generator(PCG64(SeedSequence([seed, epoch, index])))`` for a whole batch of indices,
with the seed sequence's hashing done once over the batch's arrays.

numpy builds a ``SeedSequence`` and hashes it item by item (about 10 us each, half a
digit's read in ``examples/classify_digits.py``). The hashing is the seed sequence's
documented algorithm (an entropy pool of four 32-bit words, each word hashed into the
others, then eight output words), written here over ``uint32`` arrays: the words of
``seed`` and ``epoch`` are the same for every item, so the pool's first mixing rounds
are computed once as Python ints. The words are bit-identical to numpy's (the tests
compare them), so a batch read this way draws what item-by-item reads draw.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.random.bit_generator import ISeedSequence

_MASK = 0xFFFFFFFF
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875  # the pool's hash constants
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED  # the output words' hash constants
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_POOL = 4
_WORDS = 8  # PCG64 takes four uint64: eight uint32 output words


def _hashmix(value: Any, const: int) -> tuple[Any, int]:
    """One hash of a word (a Python int or a ``uint32`` array) and the next constant."""
    value = value ^ const
    const = (const * _MULT_A) & _MASK
    value = (value * const) & _MASK if type(value) is int else value * np.uint32(const)
    return value ^ (value >> 16), const


def _mix(x: Any, y: Any) -> Any:
    left = (_MIX_L * x) & _MASK if type(x) is int else x * np.uint32(_MIX_L)
    right = (_MIX_R * y) & _MASK if type(y) is int else y * np.uint32(_MIX_R)
    if type(left) is int and type(right) is int:
        result: Any = (left - right) & _MASK
    else:
        result = np.asarray(left, np.uint32) - np.asarray(right, np.uint32)
    return result ^ (result >> 16)


def _output_constants() -> tuple[np.ndarray, np.ndarray]:
    """Per output word, the constant it is xored with and the one it is multiplied by."""
    xors, mults, const = [], [], _INIT_B
    for _ in range(_WORDS):
        xors.append(const)
        const = (const * _MULT_B) & _MASK
        mults.append(const)
    return np.array(xors, np.uint32)[:, None], np.array(mults, np.uint32)[:, None]


_OUT_XOR, _OUT_MULT = _output_constants()


def item_states(seed: int, epoch: int, indices: np.ndarray) -> np.ndarray | None:
    """``uint64 [n, 4]``: ``SeedSequence([seed, epoch, i]).generate_state(4, uint64)``
    for each ``i`` of ``indices``; ``None`` where a number does not fit one 32-bit word
    (numpy then hashes more words: read those items one by one)."""
    index = np.asarray(indices)
    if seed > _MASK or epoch > _MASK or (index.size and int(index.max()) > _MASK):
        return None
    index = index.astype(np.uint32)
    pool: list[Any] = []
    const = _INIT_A
    for word in (seed, epoch, index, 0):
        value, const = _hashmix(word, const)
        pool.append(value)
    for source in range(_POOL):
        for target in range(_POOL):
            if source != target:
                value, const = _hashmix(pool[source], const)
                pool[target] = _mix(pool[target], value)
    rows = np.empty((_WORDS, index.shape[0]), np.uint32)
    for k in range(_WORDS):
        rows[k] = pool[k % _POOL]
    rows ^= _OUT_XOR
    rows *= _OUT_MULT
    rows ^= rows >> np.uint32(16)
    return np.ascontiguousarray(rows.T).view(np.uint64)


class _Words(ISeedSequence):
    """A seed sequence whose state was computed already (:func:`item_states`)."""

    __slots__ = ("words",)

    def __init__(self, words: np.ndarray):
        self.words = words

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> np.ndarray:
        assert n_words == self.words.shape[0] and np.dtype(dtype) == self.words.dtype, "PCG64 asks 4 uint64"
        return self.words


def generator_of(words: np.ndarray) -> np.random.Generator:
    """The generator ``Generator(PCG64(seq))`` of a sequence whose state is ``words``
    (one row of :func:`item_states`)."""
    return np.random.Generator(np.random.PCG64(_Words(words)))  # type: ignore[arg-type]  # any ISeedSequence
