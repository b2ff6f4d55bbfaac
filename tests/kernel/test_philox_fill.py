"""The shared Philox fill (ember/backend/kernel/llvm/philox_fill.py): one compiled
function per (kind, dtype) that writes a uniform or bernoulli draw to memory, run by
flex's eager draws and called (declared, not defined) by compiled plans.

Oracles: the host stream (ember/backend/philox.py, numpy), bit for bit, and the
independent numpy Philox of tests/cube/philox.py with Random123's known answer."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Tensor
from ember.backend import philox
from ember.backend.dtype import DType
from ember.backend.flex import FlexBackend, native_random
from ember.backend.fusion.graph import Sc
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.kernel.llvm import philox_fill, shared
from ember.backend.kernel.steps import Kernel
from ember.backend.ops import BinaryOp
from ember.nn.functional import dropout
from tests.cube.philox import known_answer, uniform
from tests.fusion.oracle import Case
from tests.kernel.fresh_processes import run_twice

KEYS = [0, 0x0123_4567_89AB_CDEF, 2**64 - 1]
#: First counters: zero, one whose low word carries into the high word within a draw,
#: and one that wraps modulo 2**64.
COUNTERS = [0, 2**32 - 3, 2**64 - 2]
SIZES = [0, 1, 2, 3, 5, 7, 1031, 4 * 1000 + 3]
DISTRIBUTIONS = [
    Distribution.bernoulli(0.3),
    Distribution.bernoulli(0.75),
    Distribution.default(),
    Distribution.uniform(-3.0, 5.0),
    Distribution.uniform(2.0, 2.0),
]
DTYPES = {np.dtype(np.float32): DType.FLOAT32, np.dtype(np.float64): DType.FLOAT64}
_C = ctypes
_FILL = _C.CFUNCTYPE(None, _C.c_void_p, _C.c_int64, _C.c_uint64, _C.c_uint64, _C.c_double, _C.c_double, _C.c_double)


def _fill(distribution: Distribution, dtype: np.dtype, n: int, key: int, counter: int) -> np.ndarray:
    """The fill's ``n`` values, written into a buffer with a guard value after them."""
    fn = _FILL(philox_fill.fill_kernel(distribution.kind, dtype).address())
    out = np.full(n + 3, 7.0, dtype)
    params = philox_fill.parameters(distribution.kind, distribution.a, distribution.b, dtype)
    fn(out.ctypes.data, n, key, counter, *params)
    assert (out[n:] == 7.0).all(), "the fill wrote past its n values"
    return out[:n]


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=repr)
def test_the_fill_is_the_host_stream_bit_for_bit(dtype, distribution):
    for n in SIZES:
        for key in KEYS:
            for counter in COUNTERS:
                got = _fill(distribution, dtype, n, key, counter)
                want = philox.sample((n,), distribution, DTYPES[dtype], key, counter)
                assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (n, key, counter)


def test_the_known_answer_and_an_independent_philox():
    got = _fill(Distribution.default(), np.dtype(np.float32), 4, 0, 0)
    words = np.array(known_answer(), np.uint32)
    assert got.tolist() == ((words >> 8).astype(np.float64) * 2.0**-24).tolist()
    n = 4 * 1000 + 3  # odd, past a carry of the counter's low word
    got = _fill(Distribution.default(), np.dtype(np.float32), n, KEYS[1], 2**32 - 500)
    assert got.tobytes() == uniform(KEYS[1], 2**32 - 500, n).tobytes()


def test_one_function_per_kind_and_dtype():
    names = {
        (kind, dtype): philox_fill.fill_kernel(kind, dtype).register()
        for kind in ("uniform", "bernoulli")
        for dtype in DTYPES
    }
    assert len(set(names.values())) == 4
    assert (
        philox_fill.fill_kernel("bernoulli", np.dtype(np.float32)).register()
        == names["bernoulli", np.dtype(np.float32)]
    )


@pytest.mark.parametrize(
    ("distribution", "dtype"),
    [
        (Distribution.bernoulli(0.75), DType.FLOAT32),
        (Distribution.uniform(-1.0, 3.0), DType.FLOAT64),
        (Distribution.bernoulli(0.5), DType.FLOAT16),  # drawn as float32 and rounded
    ],
    ids=repr,
)
def test_flex_eager_draws_run_the_fill(monkeypatch, distribution, dtype):
    shape = (33, 31)
    key, counter = KEYS[1], 2**32 - 100
    want = philox.sample(shape, distribution, dtype, key, counter)
    direct = native_random.random(shape, distribution, dtype, key, counter)
    assert direct is not None, "a draw of 1023 values runs the fill"
    got = FlexBackend().random(shape, distribution, dtype, key, counter)
    assert got.dtype == want.dtype and got.shape == shape and got.tobytes() == want.tobytes()
    assert direct.tobytes() == want.tobytes()
    value = np.dtype(np.float64) if dtype is DType.FLOAT64 else np.dtype(np.float32)
    assert shared.symbol("ember_philox_fill", ("philox_fill", distribution.kind, value.str, _width())) in shared._LOADED
    # small draws, normal draws and EMBER_FLEX_NATIVE=0: numpy
    assert native_random.random((native_random.MIN_ELEMENTS - 1,), distribution, dtype, key, counter) is None
    assert native_random.random(shape, Distribution.normal(0.0, 1.0), dtype, key, counter) is None
    monkeypatch.setenv("EMBER_FLEX_NATIVE", "0")
    assert native_random.random(shape, distribution, dtype, key, counter) is None
    assert FlexBackend().random(shape, distribution, dtype, key, counter).tobytes() == want.tobytes()


def _width():
    from ember.backend.kernel.llvm import jit

    return jit.vector_width()


def test_a_plan_declares_the_fill_and_reads_the_mask(rng):
    # x * (mask * 1 / keep): the draw is one kernel calling the shared fill, which an
    # eager draw compiled first; the dropout kernel loads the mask.
    x = rng.standard_normal((32, 512)).astype(np.float32)
    FlexBackend().random(x.shape, Distribution.bernoulli(0.75), DType.FLOAT32, 1, 2)  # eager: compiles the fill
    before = set(shared._LOADED)
    case = Case()
    mask = case.ops.random(x.shape, Distribution.bernoulli(0.75), DType.FLOAT32, Sc(0), Sc(1))
    scaled = case.ops.binary(BinaryOp.MUL, mask, 1 / 0.75)
    y = case.ops.binary(BinaryOp.MUL, case.input(x), scaled)
    case.graph.outputs = [scaled.ref, y.ref]
    plan = LLVMExecutor().plan(case.graph)
    key, counter = KEYS[1], 2**32 - 5
    got_scaled, got_y = (np.array(a) for a in plan.run(FlexBackend(), [x], [key, counter]))
    assert plan.replay is None
    assert set(shared._LOADED) == before, "the plan compiled the fill again"
    ir_text = plan.variants[0].ir
    name = philox_fill.fill_kernel("bernoulli", np.dtype(np.float32)).register()
    assert f'declare void @"{name}"' in ir_text and f'define void @"{name}"' not in ir_text
    assert str(philox.M0) not in ir_text and str(philox.M1) not in ir_text, "Philox rounds in the plan"
    kernels = [s for s in plan.schedule.steps if isinstance(s, Kernel)]
    assert sum(1 for k in kernels for st in k.stores for e in st.expr.walk() if e.kind == "random") == 1
    drawn = philox.sample(x.shape, Distribution.bernoulli(0.75), DType.FLOAT32, key, counter)
    want_scaled = drawn * np.float32(1 / 0.75)
    assert got_scaled.tobytes() == want_scaled.tobytes()
    assert got_y.tobytes() == (x * want_scaled).tobytes()


@pytest.mark.parametrize("name", ["flex", "flex+autodiff"])
def test_eager_and_compiled_dropout_are_bit_identical(name, rng):
    device = Device.parse(name)
    data = rng.standard_normal((32, 512)).astype(np.float32)

    def fn(x: Tensor) -> Tensor:
        return dropout(x, 0.25).mul_scalar(2.0)

    def calls(f) -> list[bytes]:
        device.seed(11)
        x = Tensor.from_data(data, device=device)
        return [f(x).to_data().to_numpy().tobytes() for _ in range(3)]

    compiled = ember.compile(fn)
    got = calls(compiled)
    assert got == calls(fn)
    assert len(set(got)) == 3  # a new mask each call
    assert compiled.stats["eager"] == 0


_BODY = """
from ember import Distribution
from ember.backend import philox
from ember.backend.dtype import DType
from ember.backend.flex import FlexBackend
from ember.backend.fusion.graph import Sc
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.ops import BinaryOp
from tests.fusion.oracle import Case
x = np.random.default_rng(3).standard_normal((64, 100)).astype(np.float32)
keep = Distribution.bernoulli(0.9)
eager = FlexBackend().random(x.shape, keep, DType.FLOAT32, 5, 2**32 - 9)
case = Case()
mask = case.ops.random(x.shape, keep, DType.FLOAT32, Sc(0), Sc(1))
y = case.ops.binary(BinaryOp.MUL, case.input(x), mask)
case.graph.outputs = [mask.ref, y.ref]
plan = LLVMExecutor().plan(case.graph)
compiled, product = (np.array(a) for a in plan.run(FlexBackend(), [x], [5, 2**32 - 9]))
assert product.tobytes() == (x * eager).tobytes()
np.save(sys.argv[1], np.stack([eager, compiled, philox.sample(x.shape, keep, DType.FLOAT32, 5, 2**32 - 9)]))
"""


def test_a_new_process_loads_the_fill_and_the_plan_from_the_cache(tmp_path):
    compiled, first, second = run_twice(tmp_path, _BODY, {})
    assert compiled[0] >= 2  # the fill and the plan
    if compiled[1] != 0:
        pytest.fail(f"the second process compiled again: {compiled[1]} modules")
    np.testing.assert_array_equal(first, second)
    assert first[0].tobytes() == first[1].tobytes() == first[2].tobytes()  # eager, compiled, numpy
