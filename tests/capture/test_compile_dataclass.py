"""``register_dataclass``: a dataclass of tensors passes into and out of a compiled
function as a structure (its tensors are graph inputs and outputs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.capture import register_dataclass
from ember.errors import GraphError
from tests.conftest import assert_close


@register_dataclass
@dataclass(frozen=True)
class Pair:
    a: Tensor
    b: Tensor
    label: str = "pair"


def test_a_registered_dataclass_is_flattened(rng):
    flex = Device.flex()

    @ember.compile
    def step(pair, scale):
        return Pair(pair.b.mul_scalar(scale), pair.a.add(pair.b), pair.label + "!")

    for i in range(4):
        a, b = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
        out = step(Pair(Tensor.from_data(a, device=flex), Tensor.from_data(b, device=flex)), float(i))
        assert isinstance(out, Pair) and out.label == "pair!"
        assert_close(out.a, b * i, atol=1e-6)
        assert_close(out.b, a + b, atol=1e-6)
    assert step.stats["traces"] == 1 and step.stats["eager"] == 0


def test_only_dataclasses_register():
    with pytest.raises(GraphError, match="needs a dataclass"):
        register_dataclass(int)


def test_a_donated_argument_is_updated_in_place(rng):
    flex = Device.flex()

    @register_dataclass
    @dataclass(frozen=True)
    class Cache:
        k: Tensor
        v: Tensor

    def step(x, cache, slot):
        hidden = Tensor.arange(4, device=flex).sub(slot).equal_elem(0).reshape([1, 4])
        new = Cache(cache.k.mask_where(hidden, x), cache.v.mask_where(hidden, x.mul_scalar(2.0)))
        return new.k.sum_dim(1), new

    compiled = ember.compile(step, donate=(1,))
    cache = eager = Cache(Tensor.zeros([3, 4], device=flex), Tensor.zeros([3, 4], device=flex))
    arrays = None
    for i in range(4):
        x = Tensor.from_data(rng.standard_normal((3, 1)).astype(np.float32), device=flex)
        slot = Tensor.from_ints([i], device=flex)
        total, cache = compiled(x, cache, slot)
        want, eager = step(x, eager, slot)
        assert_close(total, want.to_numpy(), atol=1e-6)
        assert_close(cache.v, eager.v.to_numpy(), atol=1e-6)
        if i == 2:
            arrays = (cache.k._primitive, cache.v._primitive)
    # From the compiled runs on, the cache's arrays are the ones passed in, written in place.
    assert arrays is not None and cache.k._primitive is arrays[0] and cache.v._primitive is arrays[1]
    assert compiled.stats["traces"] == 1


def test_a_donated_argument_passed_twice_is_copied_first(rng):
    flex = Device.flex()
    compiled = ember.compile(lambda a, b: (a.add_scalar(1.0), b.add_scalar(2.0)), donate=(0, 1))
    for _ in range(3):
        t = Tensor.from_data(np.ones((2, 2), np.float32), device=flex)
        a, b = compiled(t, t)  # one array given up twice: each result computed as if apart
        assert_close(a, np.full((2, 2), 2.0), atol=0)
        assert_close(b, np.full((2, 2), 3.0), atol=0)
