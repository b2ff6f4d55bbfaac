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
