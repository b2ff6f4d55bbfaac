"""The fused recurrent cells and sequences: forward recording and backward steps side by side.

The LSTM cell records one function node with two outputs (``h'`` and ``c'``, see
:mod:`ember.backend.autodiff.rules.custom`); its backward is one call of the inner
backend's ``lstm_cell_backward``, or its composite (:mod:`ember.backend.composites.rnn`)
over the protocol, where the inner backend has none or the backward itself is
differentiated (``create_graph``). The GRU cell has one output: an ordinary node over
its three inputs.

A sequence (``lstm_sequence``, ``gru_sequence``: one direction over all steps) records
one function node whose outputs are the step outputs and the final states (the saved
states and gates ride along untracked); its backward is one ``*_sequence_backward``
call, which forms the hidden weight's gradient as one product over all steps. A
``create_graph`` backward recomputes the forward with the composite over the autodiff
backend (the saved states then depend on the inputs) and differentiates the
backward's composite.
"""

from __future__ import annotations

from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin
from ember.backend.composites import COMPOSITES, run


def _gru_cell_step(ops: Any, g: Any, saved: tuple, ctx: Any) -> tuple[Any, Any, Any]:
    xp, hp, h = saved
    return run(ops, "gru_cell_backward", xp, hp, h, g)  # the composite in a create_graph pass


def _inner(x: AutodiffTensor | None) -> Any:
    return None if x is None else x.inner


def _backward(inner: Any, tracked: Any, name: str, args: list[Any], create_graph: bool) -> list[Any]:
    """``name``'s kernel on ``inner``, or its composite (over the tracked backend under
    ``create_graph``, so that the backward is differentiated too)."""
    if create_graph:
        return list(COMPOSITES[name](tracked, *args))
    return list(run(inner, name, *args))


class RnnRules(RecordMixin):
    """Recording of the fused LSTM cell (the inputs and ``c'`` are kept), GRU cell (the
    inputs are kept) and the LSTM and GRU sequences."""

    def gru_cell(self, xp: AutodiffTensor, hp: AutodiffTensor, h: AutodiffTensor) -> Any:
        out = self.inner.gru_cell(xp.inner, hp.inner, h.inner)
        if out is NotImplemented:
            return NotImplemented
        parents = (xp.node, hp.node, h.node)
        if all(p is None for p in parents):
            return AutodiffTensor(out, None)
        return self._record(out, parents, _gru_cell_step, (self._keep(xp), self._keep(hp), self._keep(h)), None)

    def lstm_cell(self, gates: AutodiffTensor, c: AutodiffTensor) -> Any:
        result = self.inner.lstm_cell(gates.inner, c.inner)
        if result is NotImplemented:
            return NotImplemented
        h, c_new = result
        inner = self.inner

        def backward(grads: list[Any], values: list[Any], create_graph: bool) -> list[Any]:
            return _backward(inner, self, "lstm_cell_backward", [*values, *grads], create_graph)

        h_out, c_out = self.custom([gates, c], [(h, True), (c_new, True)], [gates, c, 1], backward)  # type: ignore[attr-defined]
        return h_out, c_out

    def lstm_sequence(
        self,
        proj: AutodiffTensor,
        w_hh: AutodiffTensor,
        h0: AutodiffTensor,
        c0: AutodiffTensor,
        valid: AutodiffTensor | None,
        reverse: bool,
    ) -> Any:
        inner = self.inner
        mask = _inner(valid)
        result = inner.lstm_sequence(proj.inner, w_hh.inner, h0.inner, c0.inner, mask, reverse)
        if result is NotImplemented:
            return NotImplemented
        y, h_n, c_n, h_in, c_in, z = result

        def backward(grads: list[Any], values: list[Any], create_graph: bool) -> list[Any]:
            w, m, hs, cs, c_last, zs, p, h, c = values
            if create_graph:  # the saved states as functions of the inputs, to differentiate through
                _, _, c_last, hs, cs, zs = COMPOSITES["lstm_sequence"](self, p, w, h, c, m, reverse)
            args = [w, m, reverse, hs, cs, c_last, zs, *grads[:3]]
            return _backward(inner, self, "lstm_sequence_backward", args, create_graph)

        outputs = [(y, True), (h_n, True), (c_n, True), (h_in, False), (c_in, False), (z, False)]
        saved = [w_hh, None if valid is None else AutodiffTensor(mask, None), 3, 4, 2, 5, proj, h0, c0]
        return tuple(self.custom([proj, w_hh, h0, c0], outputs, saved, backward))  # type: ignore[attr-defined]

    def gru_sequence(
        self,
        proj: AutodiffTensor,
        w_hh: AutodiffTensor,
        b_hh: AutodiffTensor | None,
        h0: AutodiffTensor,
        valid: AutodiffTensor | None,
        reverse: bool,
    ) -> Any:
        inner = self.inner
        mask = _inner(valid)
        result = inner.gru_sequence(proj.inner, w_hh.inner, _inner(b_hh), h0.inner, mask, reverse)
        if result is NotImplemented:
            return NotImplemented
        y, h_n, h_in, hp = result

        def backward(grads: list[Any], values: list[Any], create_graph: bool) -> list[Any]:
            w, m, xp, hs, hps, b, h = values
            if create_graph:  # the saved states as functions of the inputs, to differentiate through
                _, _, hs, hps = COMPOSITES["gru_sequence"](self, xp, w, b, h, m, reverse)
            d_proj, d_w, d_b, d_h0 = _backward(
                inner, self, "gru_sequence_backward", [w, m, reverse, xp, hs, hps, *grads[:2]], create_graph
            )
            return [d_proj, d_w, None if b_hh is None else d_b, d_h0]

        outputs = [(y, True), (h_n, True), (h_in, False), (hp, False)]
        saved = [w_hh, None if valid is None else AutodiffTensor(mask, None), proj, 2, 3, b_hh, h0]
        return tuple(self.custom([proj, w_hh, b_hh, h0], outputs, saved, backward))  # type: ignore[attr-defined]
