"""ember.backend.philox: the words against an independent Philox, the float mappings
against float64 formulas, and the properties every backend relies on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember.backend import philox
from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from tests.cube.philox import known_answer, philox_words, uniform

KEY = 0x0123_4567_89AB_CDEF


def test_known_answer_and_an_independent_implementation():
    assert philox.block(0, 0) == tuple(known_answer())
    assert philox.words(0, 0, 1)[0].tolist() == known_answer()
    # Beyond one chunk (16384 blocks), from an odd counter.
    got = philox.words(KEY, 12345, 40000).reshape(-1)
    assert np.array_equal(got, philox_words(KEY, 12345, 40000))
    assert philox.block(KEY, 2**40 + 7) == tuple(int(w) for w in philox.words(KEY, 2**40 + 7, 1)[0])


def test_counter_wraps_modulo_2_64_and_carries_into_the_high_word():
    got = philox.words(KEY, 2**64 - 3, 6).reshape(-1)
    want = np.concatenate([philox_words(KEY, 2**64 - 3, 3), philox_words(KEY, 0, 3)])
    assert np.array_equal(got, want)
    assert np.array_equal(philox.words(KEY, 2**32 - 2, 4).reshape(-1), philox_words(KEY, 2**32 - 2, 4))


def test_uniform_is_the_top_24_bits():
    got = philox.sample((1001,), Distribution.default(), DType.FLOAT32, KEY, 9)
    assert got.dtype == np.float32 and got.tobytes() == uniform(KEY, 9, 1001).tobytes()


def test_a_draw_is_a_prefix_of_a_longer_one_at_the_same_counter():
    for dist in (Distribution.default(), Distribution.normal(1.0, 2.0), Distribution.bernoulli(0.4)):
        long = philox.sample((70001,), dist, DType.FLOAT32, KEY, 5)
        short = philox.sample((65539,), dist, DType.FLOAT32, KEY, 5)
        assert short.tobytes() == long[:65539].tobytes()
        assert philox.sample((3, 5), dist, DType.FLOAT32, KEY, 5).reshape(-1).tobytes() == long[:15].tobytes()


def test_uniform_on_a_range_stays_below_high():
    # A range whose float32 rounding would put lo + u * s on hi for u close to 1.
    low, high = 1.0, float(np.nextafter(np.float32(1.0), np.float32(2.0)))
    v = philox.sample((4096,), Distribution.uniform(low, high), DType.FLOAT32, KEY, 0)
    assert v.min() >= np.float32(low) and v.max() < np.float32(high)
    v = philox.sample((100000,), Distribution.uniform(-3.0, 5.0), DType.FLOAT32, KEY, 0)
    u = uniform(KEY, 0, 100000).astype(np.float64)
    assert v.min() >= -3.0 and v.max() < 5.0
    np.testing.assert_allclose(v, -3.0 + 8.0 * u, atol=1e-6)
    assert set(philox.sample((64,), Distribution.uniform(2.5, 2.5), DType.FLOAT32, KEY, 0).tolist()) == {2.5}


def _box_muller_float64(w: np.ndarray) -> np.ndarray:
    """The exact transform the float32 mapping approximates, in float64."""
    a = (w[:, 0::2] >> 9).astype(np.float64)
    b = (w[:, 1::2] >> 8).astype(np.float64)
    r = np.sqrt(-2.0 * np.log((2.0 * a + 1.0) * 2.0**-24))
    angle = 2.0 * math.pi * b / 2**24
    return np.stack([r * np.cos(angle), r * np.sin(angle)], axis=-1).reshape(-1)


def test_normal_is_box_muller_within_a_micro():
    n = 4 * 50000
    got = philox.sample((n,), Distribution.normal(0.0, 1.0), DType.FLOAT32, KEY, 0).astype(np.float64)
    want = _box_muller_float64(philox.words(KEY, 0, n // 4))
    assert np.abs(got - want).max() < 1e-6
    scaled = philox.sample((n,), Distribution.normal(-2.0, 3.0), DType.FLOAT32, KEY, 0).astype(np.float64)
    assert np.abs(scaled - (3.0 * want - 2.0)).max() < 4e-6


def test_normal_moments_and_tails():
    z = philox.sample((1_000_000,), Distribution.normal(0.0, 1.0), DType.FLOAT32, 42, 0).astype(np.float64)
    assert abs(z.mean()) < 0.004 and abs(z.std() - 1.0) < 0.003
    assert abs(np.mean(z**3)) < 0.01 and abs(np.mean(z**4) - 3.0) < 0.03
    assert abs(np.mean(np.abs(z) > 2.0) - 0.0455) < 0.002
    assert np.abs(z).max() <= 5.78  # sqrt(-2 ln 2**-24), the float32 Box-Muller bound
    # Every sign and quadrant appears: the cos/sin pair of one draw lies on a circle.
    pairs = z.reshape(-1, 2)
    assert {(bool(c > 0), bool(s > 0)) for c, s in pairs[:100]} == {
        (True, True),
        (True, False),
        (False, True),
        (False, False),
    }


def test_bernoulli_compares_a_uniform_with_p():
    v = philox.sample((20000,), Distribution.bernoulli(0.3), DType.FLOAT32, KEY, 3)
    u = uniform(KEY, 3, 20000)
    assert np.array_equal(v, (u < np.float32(0.3)).astype(np.float32))
    assert not philox.sample((100,), Distribution.bernoulli(0.0), DType.FLOAT32, KEY, 0).any()
    assert philox.sample((100,), Distribution.bernoulli(1.0), DType.FLOAT32, KEY, 0).all()


def test_float64_takes_53_bits_from_two_words():
    v = philox.sample((1001,), Distribution.default(), DType.FLOAT64, KEY, 4)
    w = philox_words(KEY, 4, philox.blocks_for(1001, DType.FLOAT64)).astype(np.uint64)
    want = ((w[0::2] >> 5) * 2**26 + (w[1::2] >> 6)).astype(np.float64)[:1001] * 2.0**-53
    assert v.dtype == np.float64 and np.array_equal(v, want)
    z = philox.sample((200001,), Distribution.normal(1.0, 0.5), DType.FLOAT64, KEY, 0)
    assert abs(z.mean() - 1.0) < 0.005 and abs(z.std() - 0.5) < 0.005
    assert len(np.unique(z)) == z.size


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "int64"])
def test_other_dtypes_round_the_float32_draw(dtype):
    dtype = DType.parse(dtype)
    dist = Distribution.uniform(-4.0, 9.0)
    got = philox.sample((999,), dist, dtype, KEY, 1)
    assert got.dtype == dtype.np
    assert np.array_equal(got, philox.sample((999,), dist, DType.FLOAT32, KEY, 1).astype(dtype.np))


def test_blocks_for():
    assert [philox.blocks_for(n, DType.FLOAT32) for n in (0, 1, 4, 5)] == [0, 1, 1, 2]
    assert [philox.blocks_for(n, DType.FLOAT64) for n in (0, 1, 2, 3)] == [0, 1, 1, 2]
    assert philox.blocks_for(7, DType.FLOAT16) == 2
