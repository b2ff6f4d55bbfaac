"""A numpy Philox4x32-10 (Random123's constants), the oracle of the GPU kernel."""

from __future__ import annotations

import numpy as np

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
MASK = np.uint64(0xFFFFFFFF)


def philox_words(seed: int, offset: int, blocks: int) -> np.ndarray:
    """The 4 * ``blocks`` 32-bit words for counters ``offset .. offset + blocks - 1``."""
    counter = np.arange(blocks, dtype=np.uint64) + np.uint64(offset)
    c0 = counter & MASK
    c1 = counter >> np.uint64(32)
    c2 = np.zeros(blocks, np.uint64)
    c3 = np.zeros(blocks, np.uint64)
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    for _ in range(10):
        p0 = M0 * c0
        p1 = M1 * c2
        c0, c1, c2, c3 = (
            (p1 >> np.uint64(32)) ^ c1 ^ k0,
            p1 & MASK,
            (p0 >> np.uint64(32)) ^ c3 ^ k1,
            p0 & MASK,
        )
        k0 = (k0 + W0) & MASK
        k1 = (k1 + W1) & MASK
    return np.stack([c0, c1, c2, c3], axis=1).reshape(-1).astype(np.uint32)


def uniform(seed: int, offset: int, n: int) -> np.ndarray:
    words = philox_words(seed, offset, -(-n // 4))[:n]
    return ((words >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)).astype(np.float32)


def known_answer() -> list[int]:
    """Random123's published test vector: philox4x32-10 of counter 0, key 0."""
    return [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
