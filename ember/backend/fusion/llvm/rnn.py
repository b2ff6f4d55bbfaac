"""The LSTM sequence as hand-written lowerings (:class:`~.library.LibraryOp`): one
direction's whole recurrence in one step of the plan, forward and backward, instead of
``seq`` unrolled steps of graph.

``lstm_sequence`` (float32): the running states live in the ``h_n``/``c_n`` outputs;
per step the states entering it are copied to ``h_in[t]``/``c_in[t]``, the step's
input projection to ``z[t]``, one ``?gemm`` adds ``h @ w_hh`` into it, and one loop
over the batch rows applies the cell (sigmoid ``1 / (1 + exp(-v))``, tanh ``1 - 2 / (1
+ exp(2v))``, as flex's native cell) and the padding mask.

``lstm_sequence_backward``: the running gradients live in the ``d h0``/``d c0``
outputs; per step (the forward's order reversed) one loop computes the step's gate
gradients ``dZ[t]`` (into ``d proj``) and the cell state's gradient, and one ``?gemm``
adds ``dZ[t] w_hh^T`` into ``d h``; ``d w_hh`` is one ``?gemm`` ``h_in^T dZ`` over all
steps at the end. The state after a step stands for its ``c'`` (they differ only at
padded steps, where no gradient reaches the cell).

Where every reader of the forward's ``z`` is a lowered ``lstm_sequence_backward`` of the
same plan (:func:`_gates_activated`), the forward stores the gates activated (``i, f, g,
o``, the values its cell computed) in ``z`` instead of before their nonlinearities, and
the backward reads them instead of computing them again: four of the five ``exp`` and
divisions per element of its cell (the same values, so the same results).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from llvmlite import ir

from ember.backend.flex.memory import physical_memory
from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.llvm.library import Emitter, LibraryOp
from ember.backend.kernel.llvm import small_gemm
from ember.backend.kernel.llvm.mathlib import I64, mem_type
from ember.backend.kernel.llvm.small_gemm import Operand

_F32 = np.dtype(np.float32)
_BOOL = np.dtype(np.bool_)
_ONE = ir.Constant(ir.FloatType(), 1.0)
_ZERO = ir.Constant(ir.FloatType(), 0.0)


def _refs_ok(graph: Graph, values: list[Any], mask: Any) -> bool:
    avals = graph.avals
    if any(type(v) is not Ref or avals[v].dtype != _F32 for v in values if v is not None):
        return False
    return mask is None or (type(mask) is Ref and avals[mask].dtype == _BOOL)


def _forward_supports(graph: Graph, node: Node, target: Any) -> bool:
    proj, w_hh, h0, c0, valid, _ = node.args
    return target.blas is not None and _refs_ok(graph, [proj, w_hh, h0, c0], valid)


def _backward_supports(graph: Graph, node: Node, target: Any) -> bool:
    w_hh, valid, _, h_in, c_in, c_n, z, *grads = node.args
    return target.blas is not None and _refs_ok(graph, [w_hh, h_in, c_in, c_n, z, *grads], valid)


def _fits(graph: Graph, node: Node) -> bool:
    """The executor's memory bound on a library step's outputs (``Target.library``)."""
    memory = physical_memory()
    return memory is None or all(graph.avals[o].nbytes <= memory for o in node.outs)


def _gates_activated(graph: Graph, forward: Node) -> bool:
    """Whether the LSTM ``forward`` (lowered) stores its gates activated in ``z``: every
    node that reads ``z`` is an ``lstm_sequence_backward`` this module lowers too, reading
    it as its ``z`` only, and ``z`` does not leave the plan (flex's and the composite's
    backward read ``z`` before the nonlinearities). The forward and the backward both
    ask, so they agree."""
    z = forward.outs[5]
    if z in graph.outputs:
        return False
    readers = [n for n in graph.nodes if z in set(n.refs())]
    for n in readers:
        if n.op != "lstm_sequence_backward" or n.args[6] != z or sum(r == z for r in n.refs()) != 1:
            return False
        w_hh, valid, _, h_in, c_in, c_n, _z, *grads = n.args
        if not (_refs_ok(graph, [w_hh, h_in, c_in, c_n, z, *grads], valid) and _fits(graph, n)):
            return False
    return bool(readers)


def _producer_activates(graph: Graph, z: Ref) -> bool:
    """Whether ``z`` (an ``lstm_sequence_backward``'s) holds activated gates: its producer
    is an ``lstm_sequence`` this module lowers and :func:`_gates_activated` says so."""
    for node in graph.nodes:
        if node.op == "lstm_sequence" and len(node.outs) == 6 and node.outs[5] == z:
            proj, w_hh, h0, c0, valid, _ = node.args
            lowered = _refs_ok(graph, [proj, w_hh, h0, c0], valid) and _fits(graph, node)
            return lowered and _gates_activated(graph, node)
    return False


def _forward_scratch(graph: Graph, node: Node) -> dict[str, int]:
    return {"w_p": 0, "size": graph.avals[node.args[1]].nbytes}  # w_hh, packed (:meth:`_Sequence.pack`)


class _Cell:
    """The LSTM cell's arithmetic on float32 registers."""

    def __init__(self, e: Emitter):
        self.e, self.b = e, e.b
        self.math = e.module.math

    def c(self, v: float) -> ir.Constant:
        return ir.Constant(ir.FloatType(), v)

    def sigmoid(self, v: ir.Value) -> ir.Value:
        b = self.b
        return b.fdiv(self.c(1.0), b.fadd(self.c(1.0), self.math.exp_f32_flushed(b, b.fneg(v))))

    def tanh(self, v: ir.Value) -> ir.Value:
        b = self.b
        e = self.math.exp_f32_flushed(b, b.fmul(v, self.c(2.0)))
        return b.fsub(self.c(1.0), b.fdiv(self.c(2.0), b.fadd(self.c(1.0), e)))

    def gates(self, z: ir.Value, base: ir.Value, n: int, j: ir.Value) -> tuple[ir.Value, ...]:
        """``(i, f, g, o)`` activated, of the gate row at ``base`` (column ``j``)."""
        e, b = self.e, self.b
        raw = [e.load(z, b.add(base, b.add(j, ir.Constant(I64, k * n))), _F32) for k in range(4)]
        return self.sigmoid(raw[0]), self.sigmoid(raw[1]), self.tanh(raw[2]), self.sigmoid(raw[3])


def _const(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _time(b: ir.IRBuilder, k: ir.Value, steps: int, reverse: bool) -> ir.Value:
    """The time index of the ``k``-th step the forward runs."""
    return b.sub(_const(steps - 1), k) if reverse else k


def _copy(e: Emitter, src: ir.Value, dst: ir.Value, count: int) -> None:
    e.span(0, count, lambda i: e.store(e.load(src, i, _F32), dst, i, _F32))


def _transposed(e: Emitter, w: ir.Value, rows: int, cols: int) -> ir.Value:
    """``w`` ``[rows, cols]`` copied transposed into the scratch region ``w_t``: the
    per-step ``dZ w^T`` as a plain ``?gemm`` (OpenBLAS's transposed-B path measured
    2.7x slower at these shapes)."""
    b, w_t = e.b, e.regions["w_t"]

    def row(r: ir.Value) -> None:
        e.span(
            0,
            cols,
            lambda j: e.store(
                e.load(w, b.add(b.mul(r, _const(cols)), j), _F32), w_t, b.add(b.mul(j, _const(rows)), r), _F32
            ),
        )

    e.span(0, rows, row)
    return w_t


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 64) * 64


def _lstm_backward_scratch(graph: Graph, node: Node) -> dict[str, int]:
    return {"w_t": 0, "size": graph.avals[node.args[0]].nbytes}


def _copy_or_zero(e: Emitter, src: ir.Value | None, dst: ir.Value, count: int) -> None:
    if src is None:
        zero = ir.Constant(ir.FloatType(), 0.0)
        e.span(0, count, lambda i: e.store(zero, dst, i, _F32))
    else:
        _copy(e, src, dst, count)


def _mask(e: Emitter, valid: ir.Value | None, t: ir.Value, r: ir.Value, batch: int) -> ir.Value | None:
    if valid is None:
        return None
    b = e.b
    flag = b.load(b.gep(valid, [b.add(b.mul(t, _const(batch)), r)], source_etype=mem_type(_BOOL)), typ=mem_type(_BOOL))
    return b.icmp_unsigned("!=", flag, ir.Constant(flag.type, 0))


def _arg(e: Emitter, value: Any) -> ir.Value | None:
    return None if value is None else e.args[value]


class _Step(NamedTuple):
    """One step of the recurrence: its place ``k`` in the forward's order, its time
    index ``t``, and the offsets of its ``[batch, n]`` state and ``[batch, width]``
    gate blocks."""

    k: ir.Value
    t: ir.Value
    at_state: ir.Value
    at_gates: ir.Value


class _Sequence:
    """One direction's recurrence over ``[steps, batch, width]`` gates and ``[batch, n]``
    states: the loop over steps, each step's loop over its cells, and the GEMMs that
    the LSTM's and the GRU's forward and backward passes share."""

    def __init__(self, e: Emitter, gates: Ref, per_unit: int, valid: ir.Value | None, reverse: Any):
        self.e = e
        self.steps, self.batch, self.width = e.shape(gates)
        self.n = self.width // per_unit
        self.state = self.batch * self.n
        self.valid = valid
        self.reverse = bool(reverse)

    def run(self, body: Callable[[_Step], None], backward: bool = False) -> None:
        """``body`` per step, in the forward's order (the last step first when ``backward``)."""
        b = self.e.b

        def step(q: ir.Value, _: list) -> list:
            k = b.sub(_const(self.steps - 1), q) if backward else q
            t = _time(b, k, self.steps, self.reverse)
            body(_Step(k, t, b.mul(t, _const(self.state)), b.mul(t, _const(self.batch * self.width))))
            return []

        self.e.loops.run(self.steps, step)

    def cells(self, step: _Step, cell: Callable[[ir.Value | None, ir.Value, ir.Value, ir.Value], None]) -> None:
        """``cell(mask, gate_row, state_row, j)`` for each batch row (its offsets in the
        gate and state blocks, and its padding mask: ``None`` when unmasked) and column
        ``j < n``."""
        e, b = self.e, self.e.b

        def row(r: ir.Value) -> None:
            m = _mask(e, self.valid, step.t, r, self.batch)
            base_g, base_s = b.mul(r, _const(self.width)), b.mul(r, _const(self.n))
            e.span(0, self.n, lambda j: cell(m, base_g, base_s, j))

        e.span(0, self.batch, row)

    def _inline_gemm(self, m: int, n: int, k: int, a: ir.Value, b_rows: ir.Value, c: ir.Value, add: ir.Value | None):
        """``c = a @ b_rows (+ add)`` (row-major, dense) as inline vector loops
        (:mod:`ember.backend.kernel.llvm.small_gemm`); ``False`` where they do not apply."""
        if not small_gemm.enabled():
            return False
        lanes = small_gemm.lanes(self.e.module.vector_width)
        addend = None if add is None else Operand(add, n)
        return small_gemm.emit_gemm(self.e, m, n, k, Operand(a, k), Operand(b_rows, n), Operand(c, n), lanes, addend)

    def pack(self, w_hh: ir.Value) -> ir.Value | None:
        """``w_hh`` ``[n, width]`` packed into the scratch region ``w_p`` for
        :meth:`add_recurrent` (once per sequence: 64 steps read it), or ``None`` where the
        packed product does not apply."""
        lanes = small_gemm.lanes(self.e.module.vector_width)
        if not small_gemm.enabled() or not small_gemm.applies_packed(self.width, lanes):
            return None
        packed = self.e.regions["w_p"]
        small_gemm.emit_pack(self.e, self.n, self.width, Operand(w_hh, self.width), packed, lanes)
        return packed

    def add_recurrent(
        self,
        h: ir.Value,
        w_hh: ir.Value,
        gates_t: ir.Value,
        inputs_t: ir.Value | None = None,
        packed: ir.Value | None = None,
    ) -> None:
        """``gates_t = inputs_t + h @ w_hh`` (``gates_t += h @ w_hh`` without ``inputs_t``);
        ``packed``: ``w_hh`` as :meth:`pack` left it."""
        n, width = self.n, self.width
        addend = gates_t if inputs_t is None else inputs_t
        if packed is not None:
            lanes = small_gemm.lanes(self.e.module.vector_width)
            c = Operand(gates_t, width)
            small_gemm.emit_gemm_packed(
                self.e, self.batch, width, n, Operand(h, n), packed, c, lanes, Operand(addend, width)
            )
            return
        if self._inline_gemm(self.batch, width, n, h, w_hh, gates_t, addend):
            return
        if inputs_t is not None:
            _copy(self.e, inputs_t, gates_t, self.batch * width)
        self.e.gemm(_F32, False, False, self.batch, width, n, h, n, w_hh, width, _ONE, gates_t, width)

    def transposed(self, w_hh: ir.Value) -> tuple[ir.Value, bool]:
        """``w_hh^T`` in the scratch region ``w_t`` for :meth:`state_grad`: packed
        (:func:`~ember.backend.kernel.llvm.small_gemm.emit_pack`, then ``True``) where the
        packed product applies, else a dense ``[width, n]`` copy."""
        lanes = small_gemm.lanes(self.e.module.vector_width)
        if small_gemm.enabled() and small_gemm.applies_packed(self.n, lanes):
            w_t = self.e.regions["w_t"]
            small_gemm.emit_pack(self.e, self.width, self.n, Operand(w_hh, 1, self.width), w_t, lanes)
            return w_t, True
        return _transposed(self.e, w_hh, self.n, self.width), False

    def state_grad(self, d_gates: ir.Value, w_t: ir.Value, dh: ir.Value, accumulate: bool, packed: bool) -> None:
        """``dh = d_gates w_hh^T`` (``+= `` when ``accumulate``), ``w_t`` being ``w_hh^T``
        (packed where ``packed``: see :meth:`transposed`)."""
        n, width = self.n, self.width
        if packed:
            lanes = small_gemm.lanes(self.e.module.vector_width)
            addend = Operand(dh, n) if accumulate else None
            small_gemm.emit_gemm_packed(
                self.e, self.batch, n, width, Operand(d_gates, width), w_t, Operand(dh, n), lanes, addend
            )
            return
        if self._inline_gemm(self.batch, n, width, d_gates, w_t, dh, dh if accumulate else None):
            return
        beta = _ONE if accumulate else _ZERO
        self.e.gemm(_F32, False, False, self.batch, n, width, d_gates, width, w_t, n, beta, dh, n)

    def weight_grad(self, h_in: ir.Value, d_gates: ir.Value, d_w: ir.Value) -> None:
        """``d_w = h_in^T d_gates`` over all steps."""
        n, width, rows = self.n, self.width, self.steps * self.batch
        lanes = small_gemm.lanes(self.e.module.vector_width)
        if small_gemm.enabled() and small_gemm.emit_gemm(
            self.e, n, width, rows, Operand(h_in, 1, n), Operand(d_gates, width), Operand(d_w, width), lanes
        ):
            return
        self.e.gemm(_F32, True, False, n, width, self.steps * self.batch, h_in, n, d_gates, width, _ZERO, d_w, width)


def _lstm_sequence(e: Emitter) -> None:
    proj_ref, w_ref, h0_ref, c0_ref, valid_ref, reverse = e.node.args
    seq = _Sequence(e, proj_ref, 4, _arg(e, valid_ref), reverse)
    n, state = seq.n, seq.state
    proj, w_hh, h0, c0 = (e.args[r] for r in (proj_ref, w_ref, h0_ref, c0_ref))
    y, h, c, h_in, c_in, z = e.outs
    b, cell = e.b, _Cell(e)
    _copy(e, h0, h, state)
    _copy(e, c0, c, state)
    packed = seq.pack(w_hh)
    activated = _gates_activated(e.graph, e.node)

    def step(s: _Step) -> None:
        _copy(e, h, e.at(h_in, s.at_state, _F32), state)
        _copy(e, c, e.at(c_in, s.at_state, _F32), state)
        z_t = e.at(z, s.at_gates, _F32)
        seq.add_recurrent(h, w_hh, z_t, e.at(proj, s.at_gates, _F32), packed)

        def col(m: ir.Value | None, base_z: ir.Value, base_s: ir.Value, j: ir.Value) -> None:
            i, f, g, o = cell.gates(z_t, base_z, n, j)
            if activated:
                for slot, value in enumerate((i, f, g, o)):
                    e.store(value, z_t, b.add(base_z, b.add(j, _const(slot * n))), _F32)
            at = b.add(base_s, j)
            c_old = e.load(c, at, _F32)
            c_new = b.fadd(b.fmul(f, c_old), b.fmul(i, g))
            h_new = b.fmul(o, cell.tanh(c_new))
            if m is None:
                e.store(c_new, c, at, _F32)
                e.store(h_new, h, at, _F32)
                e.store(h_new, y, b.add(s.at_state, at), _F32)
                return
            e.store(b.select(m, c_new, c_old), c, at, _F32)
            e.store(b.select(m, h_new, e.load(h, at, _F32)), h, at, _F32)
            e.store(b.select(m, h_new, _ZERO), y, b.add(s.at_state, at), _F32)

        seq.cells(s, col)

    seq.run(step)


def _lstm_sequence_backward(e: Emitter) -> None:
    w_ref, valid_ref, reverse, h_in_ref, c_in_ref, c_n_ref, z_ref, gy_ref, gh_ref, gc_ref = e.node.args
    seq = _Sequence(e, z_ref, 4, _arg(e, valid_ref), reverse)
    steps, n, state = seq.steps, seq.n, seq.state
    w_hh, h_in, c_in, c_n, z = (e.args[r] for r in (w_ref, h_in_ref, c_in_ref, c_n_ref, z_ref))
    gy, gh, gc = (_arg(e, r) for r in (gy_ref, gh_ref, gc_ref))
    d_z, d_w, dh, dc = e.outs
    b, cell = e.b, _Cell(e)
    _copy_or_zero(e, gh, dh, state)
    _copy_or_zero(e, gc, dc, state)
    w_t, packed = seq.transposed(w_hh)
    activated = _producer_activates(e.graph, z_ref)

    def step(s: _Step) -> None:
        t = s.t
        nxt = b.sub(t, _const(1)) if seq.reverse else b.add(t, _const(1))
        last = b.icmp_unsigned("==", s.k, _const(steps - 1))
        # The state after step t: c_n after the last step, else the state entering the next one.
        c_after = b.select(last, c_n, e.at(c_in, b.mul(b.select(last, t, nxt), _const(state)), _F32))
        dz_t = e.at(d_z, s.at_gates, _F32)

        def col(m: ir.Value | None, base_z: ir.Value, base_s: ir.Value, j: ir.Value) -> None:
            z_t = e.at(z, s.at_gates, _F32)
            if activated:
                i, f, g, o = (e.load(z_t, b.add(base_z, b.add(j, _const(k * n))), _F32) for k in range(4))
            else:
                i, f, g, o = cell.gates(z_t, base_z, n, j)
            at = b.add(base_s, j)
            c_old = e.load(c_in, b.add(s.at_state, at), _F32)
            tc = cell.tanh(e.load(c_after, at, _F32))
            dh_old, dc_old = e.load(dh, at, _F32), e.load(dc, at, _F32)
            to_h = dh_old if gy is None else b.fadd(dh_old, e.load(gy, b.add(s.at_state, at), _F32))
            to_c = dc_old
            if m is not None:
                to_h, to_c = b.select(m, to_h, _ZERO), b.select(m, dc_old, _ZERO)
            d_c = b.fadd(to_c, b.fmul(b.fmul(to_h, o), b.fsub(_ONE, b.fmul(tc, tc))))
            grads = (
                b.fmul(b.fmul(d_c, g), b.fmul(i, b.fsub(_ONE, i))),
                b.fmul(b.fmul(d_c, c_old), b.fmul(f, b.fsub(_ONE, f))),
                b.fmul(b.fmul(d_c, i), b.fsub(_ONE, b.fmul(g, g))),
                b.fmul(b.fmul(to_h, tc), b.fmul(o, b.fsub(_ONE, o))),
            )
            for slot, value in enumerate(grads):
                e.store(value, dz_t, b.add(base_z, b.add(j, _const(slot * n))), _F32)
            through = b.fmul(d_c, f)
            if m is None:
                e.store(through, dc, at, _F32)
                return
            e.store(b.select(m, through, dc_old), dc, at, _F32)
            e.store(b.select(m, _ZERO, dh_old), dh, at, _F32)  # a padded step passes dh on

        seq.cells(s, col)
        seq.state_grad(dz_t, w_t, dh, seq.valid is not None, packed)  # (+ what padded rows passed on)

    seq.run(step, backward=True)
    seq.weight_grad(h_in, d_z, d_w)


def _gru_forward_supports(graph: Graph, node: Node, target: Any) -> bool:
    proj, w_hh, b_hh, h0, valid, _ = node.args
    return target.blas is not None and _refs_ok(graph, [proj, w_hh, b_hh, h0], valid)


def _gru_backward_supports(graph: Graph, node: Node, target: Any) -> bool:
    w_hh, valid, _, proj, h_in, hp, *grads = node.args
    return target.blas is not None and _refs_ok(graph, [w_hh, proj, h_in, hp, *grads], valid)


def _gru_gates(e: Emitter, cell: _Cell, xp: ir.Value, hp: ir.Value, base: ir.Value, n: int, j: ir.Value):
    """``(r, z, new, hp_n)`` of the GRU step's row at ``base`` (column ``j``)."""
    b = e.b

    def at(k: int) -> ir.Value:
        return b.add(base, b.add(j, _const(k * n)))

    r = cell.sigmoid(b.fadd(e.load(xp, at(0), _F32), e.load(hp, at(0), _F32)))
    z = cell.sigmoid(b.fadd(e.load(xp, at(1), _F32), e.load(hp, at(1), _F32)))
    hp_n = e.load(hp, at(2), _F32)
    return r, z, cell.tanh(b.fadd(e.load(xp, at(2), _F32), b.fmul(r, hp_n))), hp_n


def _gru_sequence(e: Emitter) -> None:
    proj_ref, w_ref, b_ref, h0_ref, valid_ref, reverse = e.node.args
    seq = _Sequence(e, proj_ref, 3, _arg(e, valid_ref), reverse)
    n, width, state = seq.n, seq.width, seq.state
    proj, w_hh, h0 = (e.args[r] for r in (proj_ref, w_ref, h0_ref))
    b_hh = _arg(e, b_ref)
    y, h, h_in, hp = e.outs
    b, cell = e.b, _Cell(e)
    _copy(e, h0, h, state)
    packed = seq.pack(w_hh)

    def step(s: _Step) -> None:
        _copy(e, h, e.at(h_in, s.at_state, _F32), state)
        hp_t, xp_t = e.at(hp, s.at_gates, _F32), e.at(proj, s.at_gates, _F32)
        if b_hh is None:
            e.span(0, seq.batch * width, lambda i: e.store(_ZERO, hp_t, i, _F32))
        else:
            e.span(0, seq.batch, lambda r: _copy(e, b_hh, e.at(hp_t, b.mul(r, _const(width)), _F32), width))
        seq.add_recurrent(h, w_hh, hp_t, packed=packed)

        def col(m: ir.Value | None, base_g: ir.Value, base_s: ir.Value, j: ir.Value) -> None:
            _, zg, new, _ = _gru_gates(e, cell, xp_t, hp_t, base_g, n, j)
            at = b.add(base_s, j)
            h_old = e.load(h, at, _F32)
            h_new = b.fadd(new, b.fmul(zg, b.fsub(h_old, new)))
            if m is None:
                e.store(h_new, h, at, _F32)
                e.store(h_new, y, b.add(s.at_state, at), _F32)
                return
            e.store(b.select(m, h_new, h_old), h, at, _F32)
            e.store(b.select(m, h_new, _ZERO), y, b.add(s.at_state, at), _F32)

        seq.cells(s, col)

    seq.run(step)


def _gru_sequence_backward(e: Emitter) -> None:
    w_ref, valid_ref, reverse, proj_ref, h_in_ref, hp_ref, gy_ref, gh_ref = e.node.args
    seq = _Sequence(e, proj_ref, 3, _arg(e, valid_ref), reverse)
    n, width, state = seq.n, seq.width, seq.state
    w_hh, proj, h_in, hp = (e.args[r] for r in (w_ref, proj_ref, h_in_ref, hp_ref))
    gy, gh = (_arg(e, r) for r in (gy_ref, gh_ref))
    d_xp, d_w, d_b, dh = e.outs
    b, cell = e.b, _Cell(e)
    _copy_or_zero(e, gh, dh, state)
    w_t, packed = seq.transposed(w_hh)
    d_hp = e.regions["d_hp"]

    def step(s: _Step) -> None:
        xp_t, hp_t, dxp_t = (e.at(v, s.at_gates, _F32) for v in (proj, hp, d_xp))

        def col(m: ir.Value | None, base_g: ir.Value, base_s: ir.Value, j: ir.Value) -> None:
            rg, zg, new, hp_n = _gru_gates(e, cell, xp_t, hp_t, base_g, n, j)
            at = b.add(base_s, j)
            dh_old = e.load(dh, at, _F32)
            to_h = dh_old if gy is None else b.fadd(dh_old, e.load(gy, b.add(s.at_state, at), _F32))
            if m is not None:
                to_h = b.select(m, to_h, _ZERO)
            d_n = b.fmul(b.fmul(to_h, b.fsub(_ONE, zg)), b.fsub(_ONE, b.fmul(new, new)))
            d_r = b.fmul(b.fmul(d_n, hp_n), b.fmul(rg, b.fsub(_ONE, rg)))
            h_old = e.load(h_in, b.add(s.at_state, at), _F32)
            d_z = b.fmul(b.fmul(to_h, b.fsub(h_old, new)), b.fmul(zg, b.fsub(_ONE, zg)))
            for slot, value in enumerate((d_r, d_z, d_n)):
                e.store(value, dxp_t, b.add(base_g, b.add(j, _const(slot * n))), _F32)
            direct = b.fmul(to_h, zg)  # through h' = n + z (h - n)
            e.store(direct if m is None else b.select(m, direct, dh_old), dh, at, _F32)

        seq.cells(s, col)
        # d hp[t] is d xp[t] with the new gate scaled by r: form it in the scratch row
        # block, then dh += d hp[t] w_hh^T.
        dhp_t = e.at(d_hp, s.at_gates, _F32)

        def hp_row(r: ir.Value) -> None:
            base_g = b.mul(r, _const(width))

            def col(j: ir.Value) -> None:
                rg = _gru_gates(e, cell, xp_t, hp_t, base_g, n, j)[0]
                for slot in range(3):
                    at = b.add(base_g, b.add(j, _const(slot * n)))
                    value = e.load(dxp_t, at, _F32)
                    e.store(b.fmul(value, rg) if slot == 2 else value, dhp_t, at, _F32)

            e.span(0, n, col)

        e.span(0, seq.batch, hp_row)
        seq.state_grad(dhp_t, w_t, dh, True, packed)

    seq.run(step, backward=True)
    seq.weight_grad(h_in, d_hp, d_w)
    e.span(0, width, lambda j: e.store(_ZERO, d_b, j, _F32))

    def sum_row(i: ir.Value) -> None:
        base = b.mul(i, _const(width))
        e.span(
            0, width, lambda j: e.store(b.fadd(e.load(d_b, j, _F32), e.load(d_hp, b.add(base, j), _F32)), d_b, j, _F32)
        )

    e.span(0, seq.steps * seq.batch, sum_row)


def _gru_backward_scratch(graph: Graph, node: Node) -> dict[str, int]:
    d_hp = _aligned(graph.avals[node.args[3]].nbytes)  # d hp: one [S, B, 3H] float32 block
    return {"d_hp": 0, "w_t": d_hp, "size": d_hp + graph.avals[node.args[0]].nbytes}


#: The recurrent sequences' lowerings, registered in :data:`.library.LIBRARY`.
RNN_LIBRARY: dict[str, LibraryOp] = {
    "lstm_sequence": LibraryOp(_forward_supports, _forward_scratch, _lstm_sequence),
    "lstm_sequence_backward": LibraryOp(_backward_supports, _lstm_backward_scratch, _lstm_sequence_backward),
    "gru_sequence": LibraryOp(_gru_forward_supports, _forward_scratch, _gru_sequence),
    "gru_sequence_backward": LibraryOp(_gru_backward_supports, _gru_backward_scratch, _gru_sequence_backward),
}
