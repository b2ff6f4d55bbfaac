"""Initializers: distributions and Burn's fan rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import Device
from ember.errors import ConfigError
from ember.nn import (
    Constant,
    KaimingNormal,
    KaimingUniform,
    Normal,
    Ones,
    Orthogonal,
    Uniform,
    XavierNormal,
    XavierUniform,
    Zeros,
)


@pytest.fixture
def flex():
    device = Device.flex()
    device.seed(0)
    return device


def test_constant_ones_zeros(flex):
    assert Constant(0.5).init([2], flex).tolist() == [0.5, 0.5]
    assert Ones().init([2], flex).tolist() == [1.0, 1.0]
    assert Zeros().init([2], flex, dtype="float64").dtype.value == "float64"


def test_uniform_normal(flex):
    u = Uniform(-2.0, 1.0).init([20000], flex).to_numpy()
    assert u.min() >= -2 and u.max() < 1 and abs(u.mean() + 0.5) < 0.03
    n = Normal(1.0, 3.0).init([20000], flex).to_numpy()
    assert abs(n.mean() - 1) < 0.1 and abs(n.std() - 3) < 0.1
    with pytest.raises(ConfigError):
        Uniform(1.0, 0.0)
    with pytest.raises(ConfigError):
        Normal(0.0, -1.0)


@pytest.mark.parametrize("fan_out_only", [False, True])
def test_kaiming(flex, fan_out_only):
    fan_in, fan_out = 400, 100
    fan = fan_out if fan_out_only else fan_in
    u = (
        KaimingUniform(gain=2.0, fan_out_only=fan_out_only)
        .init_with([fan_in, fan_out], fan_in, fan_out, flex)
        .to_numpy()
    )
    bound = 2.0 * math.sqrt(3.0 / fan)
    assert np.abs(u).max() <= bound and np.abs(u).max() > 0.95 * bound
    n = (
        KaimingNormal(gain=2.0, fan_out_only=fan_out_only)
        .init_with([fan_in, fan_out], fan_in, fan_out, flex)
        .to_numpy()
    )
    assert abs(n.std() - 2.0 / math.sqrt(fan)) < 0.02 * 2.0 / math.sqrt(fan) * 5


def test_xavier(flex):
    u = XavierUniform(gain=1.5).init_with([300, 200], 300, 200, flex).to_numpy()
    bound = 1.5 * math.sqrt(6.0 / 500)
    assert np.abs(u).max() <= bound and np.abs(u).max() > 0.95 * bound
    n = XavierNormal().init_with([300, 200], 300, 200, flex).to_numpy()
    assert abs(n.std() - math.sqrt(2.0 / 500)) < 0.003


def test_orthogonal(flex):
    for shape in ([6, 4], [4, 6], [3, 2, 2]):
        q = Orthogonal(gain=2.0).init(shape, flex).to_numpy().reshape(shape[0], -1)
        rows, cols = q.shape
        gram = q.T @ q if rows >= cols else q @ q.T
        np.testing.assert_allclose(gram, 4.0 * np.eye(min(rows, cols)), atol=1e-5)
    with pytest.raises(ConfigError, match="rank >= 2"):
        Orthogonal().init([3], flex)


def test_missing_fan_is_reported_early(flex):
    with pytest.raises(ConfigError, match="fan_in"):
        KaimingUniform().lazy([3, 3], None, None, flex)
    with pytest.raises(ConfigError, match="fan_in and fan_out"):
        XavierUniform().init([3, 3], flex)
