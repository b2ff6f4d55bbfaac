"""A plan's products of the same views share one LLVM function (a model's repeated
blocks compile their products once): the module defines one function per distinct
product, and each product's value is still its own, against float64."""

from __future__ import annotations

import re

import numpy as np

import ember
from ember import Device, Tensor
from tests.conftest import assert_close


def test_products_of_the_same_views_share_one_function(rng):
    x = rng.standard_normal((8, 32)).astype(np.float32)
    same = [rng.standard_normal((32, 48)).astype(np.float32) for _ in range(3)]
    other = rng.standard_normal((32, 16)).astype(np.float32)

    def step(x, a, b, c, d):
        return x.matmul(a).relu(), x.matmul(b).exp(), x.matmul(c).tanh(), x.matmul(d).relu()

    compiled = ember.compile(step)
    args = [Tensor.from_data(v, device=Device.flex()) for v in (x, *same, other)]
    compiled(*args)  # the first call replays; the plan compiles for the next
    got = [t.to_numpy() for t in compiled(*args)]
    x64 = x.astype(np.float64)
    expected = [np.maximum(x64 @ same[0], 0), np.exp(x64 @ same[1]), np.tanh(x64 @ same[2]), np.maximum(x64 @ other, 0)]
    for value, ref in zip(got, expected):
        assert_close(value, ref, rtol=1e-5, atol=1e-5)
    (entry,) = compiled._entries.values()
    (variant,) = entry.plan.variants
    products = set(re.findall(r"define internal void @\"?([\w.]*_m\d+)\"?\(", variant.ir))
    assert len(products) == 2, products  # one for the three [8,32]x[32,48], one for [8,32]x[32,16]
