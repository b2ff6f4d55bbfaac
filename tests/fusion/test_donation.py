"""Donation: outputs written into the buffers of the inputs they replace
(``LLVMPlan.run(..., donated=...)``, ``LLVMPlan.bind``), accepted only where the
schedule proves it safe, and always giving what a run without donation gives."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.flex import FlexBackend
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp
from tests.fusion.oracle import Case


@pytest.fixture(scope="module")
def executor():
    return LLVMExecutor()


def _run(executor, build, donated, values):
    """(outputs of a donated run on copies of ``values``, the copies, outputs of a plain
    run, the plan)."""
    case = Case()
    refs = [case.input(v) for v in values]
    graph, scalars = case.abstract(build(case.ops, *refs))
    plan = executor.plan(graph)
    flex = FlexBackend()
    plain = [np.array(a) for a in plan.run(flex, [v.copy() for v in values], scalars)]
    copies = [v.copy() for v in values]
    out = plan.run(flex, copies, scalars, donated)
    return out, copies, plain, plan


def test_an_elementwise_update_is_written_into_its_input(executor, rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)

    def build(ops, x):
        total = ops.reduce(ReduceOp.SUM, x, 1)  # its kernel runs first: it reads x before the update
        return [ops.binary(BinaryOp.ADD, ops.binary(BinaryOp.MUL, x, 2.0), 1.0), total]

    out, copies, plain, plan = _run(executor, build, ((0, 0),), [x])
    assert out[0] is copies[0] and plan.donated(((0, 0),)) == ((0, 0),)
    np.testing.assert_array_equal(out[0], plain[0])
    np.testing.assert_array_equal(out[1], plain[1])

    def reordered(ops, x):  # now the sum's kernel runs after the update's: no donation
        return [ops.binary(BinaryOp.ADD, ops.binary(BinaryOp.MUL, x, 2.0), 1.0), ops.reduce(ReduceOp.SUM, x, 1)]

    out, copies, plain, plan = _run(executor, reordered, ((0, 0),), [x])
    assert plan.donated(((0, 0),)) == () and out[0] is not copies[0]
    np.testing.assert_array_equal(copies[0], x)
    for a, e in zip(out, plain):
        np.testing.assert_array_equal(a, e)


def test_adam_updates_in_place_match_fresh_outputs_bit_for_bit(executor, rng):
    shapes = [(4, 16), (16,), (16, 1), (1,)]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]  # params
    arrays += [rng.standard_normal(s).astype(np.float32) for s in shapes]  # grads
    arrays += [np.abs(rng.standard_normal(s)).astype(np.float32) for s in shapes for _ in range(1)]  # moments 1
    arrays += [np.abs(rng.standard_normal(s)).astype(np.float32) for s in shapes]  # moments 2

    def build(ops, *refs):
        p, g, m1, m2 = refs[:4], refs[4:8], refs[8:12], refs[12:]
        outs, ms, vs, _ = ops.adam_step_many(
            list(p),
            list(g),
            list(m1),
            list(m2),
            None,
            lr=1e-2,
            beta_1=0.9,
            beta_2=0.999,
            epsilon=1e-5,
            weight_decay=0.0,
            decoupled=False,
            amsgrad=False,
            time=3,
        )
        return outs + ms + vs

    donated = tuple((k, k) for k in range(4)) + tuple((4 + k, 8 + k) for k in range(8))
    out, copies, plain, plan = _run(executor, build, donated, arrays)
    assert plan.donated(donated) == donated
    for k, i in donated:
        assert out[k] is copies[i]
    for a, e in zip(out, plain):
        np.testing.assert_array_equal(a, e)
    for g, original in zip(copies[4:8], arrays[4:8]):
        np.testing.assert_array_equal(g, original)  # the gradients were not donated


def test_an_input_read_after_the_write_is_not_donated(executor, rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)

    def build(ops, x):
        a = ops.binary(BinaryOp.ADD, x, 1.0)
        return [a, ops.matmul(ops.unary(UnaryOp.EXP, a), x)]  # the matmul reads x after a is stored

    out, copies, plain, plan = _run(executor, build, ((0, 0),), [x])
    assert plan.donated(((0, 0),)) == ()
    assert out[0] is not copies[0]
    np.testing.assert_array_equal(copies[0], x)
    for a, e in zip(out, plain):
        np.testing.assert_array_equal(a, e)


def test_an_input_read_at_another_element_is_not_donated(executor, rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)

    def build(ops, x):
        return [ops.binary(BinaryOp.ADD, x, ops.permute(x, (1, 0)))]  # x + x.T: element (j, i) read at (i, j)

    out, copies, plain, plan = _run(executor, build, ((0, 0),), [x])
    assert plan.donated(((0, 0),)) == ()
    np.testing.assert_array_equal(copies[0], x)
    np.testing.assert_array_equal(out[0], plain[0])


def test_an_input_that_is_also_returned_is_not_donated(executor, rng):
    x = rng.standard_normal(10).astype(np.float32)

    def build(ops, x):
        return [ops.binary(BinaryOp.MUL, x, 3.0), ops.reshape(x, (2, 5))]

    out, copies, plain, plan = _run(executor, build, ((0, 0),), [x])
    assert plan.donated(((0, 0),)) == ()
    np.testing.assert_array_equal(out[1], x.reshape(2, 5))


def test_a_reduction_epilogue_updates_in_place(executor, rng):
    bias = rng.standard_normal(6).astype(np.float32)
    grad = rng.standard_normal((32, 6)).astype(np.float32)

    def build(ops, b, g):  # b - 0.1 * g.sum(0): the update is the reduction's epilogue
        total = ops.reshape(ops.reduce(ReduceOp.SUM, g, 0), (6,))
        return [ops.binary(BinaryOp.SUB, b, ops.binary(BinaryOp.MUL, total, 0.1))]

    out, copies, plain, plan = _run(executor, build, ((0, 0),), [bias, grad])
    assert plan.donated(((0, 0),)) == ((0, 0),) and out[0] is copies[0]
    np.testing.assert_array_equal(out[0], plain[0])


def test_a_donated_input_that_is_not_dense_is_copied_first(executor, rng):
    base = rng.standard_normal((8, 8)).astype(np.float32)
    case = Case()
    x = case.input(base)
    graph, scalars = case.abstract([case.ops.binary(BinaryOp.MUL, x, 2.0)])
    plan = executor.plan(graph)
    view = base.copy().T  # not C-contiguous
    before = view.copy()
    out = plan.run(FlexBackend(), [view], scalars, ((0, 0),))
    np.testing.assert_array_equal(out[0], before * 2)
    np.testing.assert_array_equal(view, before)  # written into the copy, not the view


def test_a_binding_holds_the_donated_inputs_across_runs(executor, rng):
    w = rng.standard_normal((4, 4)).astype(np.float32)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    case = Case()
    w_ref, x_ref = case.input(w), case.input(x)
    y = case.ops.matmul(x_ref, w_ref)
    new_w = case.ops.binary(BinaryOp.SUB, w_ref, case.ops.binary(BinaryOp.MUL, w_ref, 0.5))
    graph, scalars = case.abstract([new_w, case.ops.reduce(ReduceOp.SUM, y, 1)])
    plan = executor.plan(graph)
    flex = FlexBackend()
    donated = ((0, 0),)
    held = w.copy()
    plan.run(flex, [held.copy(), x], scalars, donated)  # compiles the variant that accepts the pair
    binding = plan.bind(donated, [held])
    assert binding is not None and binding.positions == (0,)
    expected_w = w.copy()
    for _ in range(3):
        (total,) = binding.run(flex, [x], scalars)  # only the output not held
        np.testing.assert_allclose(total, (x @ expected_w).sum(1, keepdims=True), rtol=1e-5)
        expected_w = expected_w - expected_w * np.float32(0.5)
        np.testing.assert_array_equal(held, expected_w)
        # A plain run with other arrays in between does not disturb the binding.
        other = rng.standard_normal((4, 4)).astype(np.float32)
        plan.run(flex, [other, x], scalars, donated)
    assert plan.bind(donated, [held.T]) is None  # not dense: cannot be written in place


def test_a_binding_follows_the_variants_its_scalars_need(executor, rng):
    """Weight decay's zero-ness is a guard of Adam's graph: a binding switches between
    the two variants as it changes and keeps updating its held arrays like a fresh run."""
    shapes = [(6, 4), (4,)]
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    case = Case()
    p = [case.input(a.copy()) for a in params]
    g = [case.input(a) for a in grads]
    m1 = [case.input(np.zeros(s, np.float32)) for s in shapes]
    m2 = [case.input(np.zeros(s, np.float32)) for s in shapes]
    outs, ms, vs, _ = case.ops.adam_step_many(
        p,
        g,
        m1,
        m2,
        None,
        lr=1e-2,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-5,
        weight_decay=0.5,
        decoupled=False,
        amsgrad=False,
        time=1,
    )
    graph, traced = case.abstract(outs + ms + vs)
    where = {value: n for n, value in enumerate(traced)}  # the traced values are distinct
    plan = executor.plan(graph)
    flex = FlexBackend()
    donated = ((0, 0), (1, 1), (2, 4), (3, 5), (4, 6), (5, 7))  # parameters, then both moments

    def scalars(weight_decay: float, time: int) -> list:
        values = list(traced)
        values[where[0.5]], values[where[1]] = weight_decay, time
        return values

    held = [a.copy() for a in params] + [np.zeros(s, np.float32) for _ in range(2) for s in shapes]  # p, m1, m2
    plan.run(flex, [a.copy() for a in held[:2]] + grads + [a.copy() for a in held[2:]], scalars(0.5, 1), donated)
    binding = plan.bind(donated, held)
    assert binding is not None
    reference = [a.copy() for a in held]
    for step, weight_decay in enumerate([0.5, 0.0, 0.0, 0.5, 0.0], start=1):
        binding.run(flex, grads, scalars(weight_decay, step))
        fresh = plan.run(flex, reference[:2] + grads + reference[2:], scalars(weight_decay, step))
        reference = [np.array(a) for a in fresh]
        for array, expected in zip(held, reference):
            np.testing.assert_array_equal(array, expected)
    assert len(plan.variants) >= 2
    assert len({v.donated for v in plan.variants if v.offered == donated}) == 1
