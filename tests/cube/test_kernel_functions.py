"""The op table's kernel-only functions (KernelFn: the flushed exp, the normal tail)
as printed by the WGSL printer, run on the cube backend against float64."""

from __future__ import annotations

import math

import numpy as np

from ember.backend.cube import ir
from ember.backend.cube.kernels import elementwise
from ember.backend.dtype import DType
from ember.backend.kernel.op_table import KernelFn


def test_wgsl_flushed_exp_and_normal_tail_against_float64(backend):
    values = np.concatenate(
        [np.linspace(-100, 90, 1901, dtype=np.float32), np.float32([-87.4, -87.3, 0.0, -0.0, 5.5, 30.0])]
    )
    x = backend.from_numpy(values)
    storage = backend.storage(DType.FLOAT32)
    load = ir.load(0, "f32")
    e = backend.to_numpy(elementwise.run(backend, ir.unary(KernelFn.EXP_FLUSHED, load), [x], storage, x.shape))
    tail = ir.unary(KernelFn.NORMAL_TAIL, ir.unary("abs", load))
    q = backend.to_numpy(elementwise.run(backend, tail, [x], storage, x.shape))
    v64 = values.astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.where(v64 < -87.33654, 0.0, np.exp(v64))
    finite = want < 3.4e38
    np.testing.assert_allclose(e[finite], want[finite], rtol=2e-5)  # WGSL exp: 3 + 2|x| ulp
    assert np.all(e[v64 > 88.72283] == np.inf)
    assert np.all(e[v64 < -87.33654] == 0.0)
    np.testing.assert_allclose(q, [0.5 * math.erfc(abs(t) / math.sqrt(2.0)) for t in v64], atol=3e-7)
