"""The kernel IR, the WGSL it becomes, and the kernel cache's counters."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.backend.cube import ir, wgsl
from ember.backend.cube.buffer import coalesce
from ember.backend.cube.dtypes import storage_for
from ember.backend.cube.kernels import elementwise
from ember.backend.dtype import DType
from ember.backend.kernel.exprs import Exprs
from ember.backend.kernel.views import View


def test_expressions_are_typed_and_hashable():
    x = ir.load(0, "f32")
    e1 = ir.binary("mul", ir.unary("exp", x), ir.scalar(0, "f32"))
    e2 = ir.binary("mul", ir.unary("exp", ir.load(0, "f32")), ir.scalar(0, "f32"))
    assert e1 == e2 and hash(e1) == hash(e2) and ir.type_of(e1) == "f32"
    assert ir.type_of(ir.binary("lt", x, x)) == "bool"
    assert ir.type_of(ir.convert(x, "i32")) == "i32" and ir.convert(x, "f32") is x
    assert ir.num_inputs(ir.select(ir.load(2, "bool"), x, x)) == 3
    with pytest.raises(TypeError):
        ir.binary("add", x, ir.load(1, "i32"))
    with pytest.raises(TypeError):
        ir.unary("exp", ir.load(0, "bool"))


def test_a_tree_is_keyed_by_its_structure_wherever_it_was_built():
    # The eager builders and a fusion launch make the same kernel-IR value.
    exprs = Exprs()
    f32 = np.dtype(np.float32)
    load = exprs.load(7, View.contiguous((4,)), f32)
    fused = exprs.make("unary", "exp", (exprs.make("binary", "mul", (load, exprs.const(2.0, f32)), f32),), f32)
    launch = ir.Launch()
    eager = ir.unary("exp", ir.binary("mul", ir.load(0, "f32"), ir.const(2, "f32")))
    assert launch(fused) == eager and hash(launch(fused)) == hash(eager)
    assert launch.operands == [(7, View.contiguous((4,)).normalized())]
    # Constants are compared by their bits: -0.0 is not 0.0, NaN is itself.
    assert ir.const(-0.0, "f32") != ir.const(0.0, "f32")
    assert ir.const(float("nan"), "f32") == ir.const(float("nan"), "f32")
    assert exprs.const(-0.0, f32) is not exprs.const(0.0, f32)


def test_a_fused_uint8_result_is_masked_where_it_is_made():
    exprs = Exprs()
    u8 = np.dtype(np.uint8)
    x = exprs.load(0, View.contiguous((4,)), u8)
    tree = ir.Launch()(exprs.make("binary", "add", (x, x), u8))
    emitter = ir.Emitter({0: "x"}, {})
    assert emitter.emit(tree) == "v2"
    byte = wgsl.literal(255, "i32")
    assert emitter.lines == [
        "    let v0: i32 = x;",
        "    let v1: i32 = (v0 + v0);",
        f"    let v2: i32 = (v1 & {byte});",
    ]
    # An eager tree is typed by compute type: its store masks instead.
    eager = ir.Emitter({0: "x"}, {})
    eager.emit(ir.binary("add", ir.load(0, "i32"), ir.load(0, "i32")))
    assert eager.lines == ["    let v0: i32 = x;", "    let v1: i32 = (v0 + v0);"]


def test_generated_source_is_self_contained():
    f32 = storage_for(DType.FLOAT32, False)
    expr = ir.binary("maximum", ir.unary("erf", ir.load(0, "f32")), ir.load(1, "f32"))
    src = elementwise._source(expr, (f32, f32), f32, ("c", "s", "c")).source
    assert "fn erf_f(" in src and "fn max_f(" in src and "fn is_nan_f(" in src
    assert "fn pow_f(" not in src  # only the helpers the body uses
    assert "var<storage, read> in1" in src and "var<storage, read_write> out0" in src
    assert "enable f16;" not in src
    half = storage_for(DType.FLOAT16, True)
    assert "enable f16;" in elementwise._source(ir.load(0, "f32"), (half,), half, ("c", "c")).source


def test_coalesce_merges_dense_dims():
    assert coalesce((2, 3, 4), (12, 4, 1), (12, 4, 1)) == ((24,), [(1,), (1,)])
    assert coalesce((2, 3, 4), (12, 4, 1), (0, 0, 1)) == ((6, 4), [(4, 1), (0, 1)])
    assert coalesce((1, 5, 1), (5, 1, 1)) == ((5,), [(1,)])
    assert coalesce((), ()) == ((), [()])


def test_one_kernel_per_op_dtype_and_layout_class(gpu, backend):
    rng = np.random.default_rng(0)
    a = Tensor.from_data(rng.standard_normal((5, 7)).astype(np.float32), device=gpu)
    a.exp()  # warm: this key is compiled once, whatever ran before
    start = backend.stats()
    # New shapes of one layout class reuse the kernel (sizes that are whole quads of 4
    # take the vec4 kernel, one more per class).
    for shape in [(3,), (17, 3), (2, 3, 5)]:
        Tensor.ones(shape, device=gpu).exp()
    after_shapes = backend.stats()
    assert after_shapes["compiles"] - start["compiles"] <= 1  # at most the fill kernel of ones
    Tensor.ones((4, 4), device=gpu).exp()
    quads = backend.stats()
    for shape in [(8,), (3, 4, 4), (1, 12)]:
        Tensor.ones(shape, device=gpu).exp()
    assert backend.stats()["compiles"] == quads["compiles"]
    a.transpose().exp()  # a strided operand: a new layout class, compiled once
    mid = backend.stats()
    a.transpose().exp()
    Tensor.ones((9, 2), device=gpu).transpose().exp()
    end = backend.stats()
    assert end["compiles"] == mid["compiles"]
    assert end["cache_hits"] > mid["cache_hits"]
    a.cast("float16").exp()  # a new storage: compiles
    assert backend.stats()["compiles"] > end["compiles"]


def test_launches_are_batched_until_a_read(gpu, backend):
    x = Tensor.ones([64], device=gpu)
    gpu.sync()
    before = backend.stats()
    y = x
    for _ in range(10):
        y = y.add_scalar(1.0)
    mid = backend.stats()
    assert mid["launches"] - before["launches"] == 10 and mid["submits"] == before["submits"]
    assert y.to_numpy()[0] == 11.0
    after = backend.stats()
    assert after["submits"] == mid["submits"] + 1 and after["readbacks"] == mid["readbacks"] + 1


def test_views_cost_no_launch(gpu, backend):
    x = Tensor.from_data(np.arange(24, dtype=np.float32).reshape(2, 3, 4), device=gpu)
    before = backend.stats()["launches"]
    v = x.permute([2, 0, 1]).flip([0]).slice([(0, 4, 2), None, (1, 3)]).expand([2, 2, 2, 2])
    assert backend.stats()["launches"] == before
    ref = np.broadcast_to(np.flip(np.arange(24).reshape(2, 3, 4).transpose(2, 0, 1), 0)[0:4:2, :, 1:3], (2, 2, 2, 2))
    assert v.to_numpy().tolist() == ref.tolist()


def test_helpers_pull_in_their_dependencies():
    code = wgsl.helpers_for("let y = sinh_f(x) + max_f(x, x);")
    assert code.index("fn expm1_f") < code.index("fn sinh_f")
    assert code.index("fn is_nan_f") < code.index("fn max_f")
    assert code.count("fn is_nan_f") == 1


def test_a_fused_clamp_is_a_maximum_then_a_minimum():
    exprs = Exprs()
    f32 = np.dtype(np.float32)
    x = exprs.load(0, View.contiguous((4,)), f32)
    low, high = exprs.const(-1.0, f32), exprs.const(2.0, f32)
    emitter = ir.Emitter({0: "x"}, {})
    assert emitter.emit(ir.Launch()(exprs.make("clamp", None, (x, low, high), f32))) == "v4"
    lo, hi = wgsl.literal(-1.0, "f32"), wgsl.literal(2.0, "f32")
    assert emitter.lines == [
        "    let v0: f32 = x;",
        f"    let v1: f32 = {lo};",
        "    let v2: f32 = max_f(v0, v1);",
        f"    let v3: f32 = {hi};",
        "    let v4: f32 = min_f(v2, v3);",
    ]
    only_low = ir.Emitter({0: "x"}, {})
    only_low.emit(ir.Launch()(exprs.make("clamp", None, (x, low, None), f32)))
    assert only_low.lines[-1] == "    let v2: f32 = max_f(v0, v1);"
