"""flex's native LSTM cell kernels (see :mod:`ember.backend.flex.native`, which compiles
them with its other kernels, and :mod:`ember.backend.flex.lstm_cell`, which calls them):
one pass over a step's gates and states, forward and backward, with the kernel layer's
float32 ``exp`` (sigmoid and tanh both from it)."""

from __future__ import annotations

from typing import Any

from ember.backend.flex.native import _Emitter


class RecurrentEmitter(_Emitter):
    """The LSTM cell's kernels (``ember.backend.flex.lstm_cell``): rows of ``[4n]`` gate
    pre-activations (input, forget, cell, output) and ``[n]`` states."""

    def _gates(self, z: Any, c: Any, r: Any, n: Any, j: Any) -> tuple[Any, ...]:
        """``(i, f, g, o, c)`` at row ``r``, column ``j``: the activated gates and the state."""
        b = self.b
        zr = self.row(z, r, b.mul(n, self.ir.Constant(self.i64, 4)))
        i, f, g, o = (self.load(zr, b.add(b.mul(n, self.ir.Constant(self.i64, k)), j)) for k in range(4))
        return self._sigmoid(i), self._sigmoid(f), self._tanh(g), self._sigmoid(o), self.load(self.row(c, r, n), j)

    def _sigmoid(self, v: Any) -> Any:
        """``1 / (1 + exp(-v))``: 0 and 1 at the ends, NaN stays NaN."""
        b, c = self.b, self.c
        return b.fdiv(c(1.0), b.fadd(c(1.0), self.math.exp_f32_flushed(b, b.fneg(v))))

    def _tanh(self, v: Any) -> Any:
        """``1 - 2 / (1 + exp(2 v))``: float32 arithmetic that vectorises (the kernel
        layer's ``tanh_f32`` widens to float64); within a few 1e-8 of ``tanh``."""
        b, c = self.b, self.c
        return b.fsub(c(1.0), b.fdiv(c(2.0), b.fadd(c(1.0), self.math.exp_f32_flushed(b, b.fmul(v, c(2.0))))))

    def lstm_cell(self) -> None:
        z, cs, h_out, c_out, rows, n = self.function(
            "ember_lstm_cell", [self.ptr, self.ptr, self.ptr, self.ptr, self.i64, self.i64]
        )
        b = self.b

        def row(r):
            def col(j):
                i, f, g, o, c = self._gates(z, cs, r, n, j)
                c_new = b.fadd(b.fmul(f, c), b.fmul(i, g))
                self.store(c_new, self.row(c_out, r, n), j)
                self.store(b.fmul(o, self._tanh(c_new)), self.row(h_out, r, n), j)

            self.loop(n, col)

        self.loop(rows, row)
        b.ret_void()

    def lstm_cell_backward(self) -> None:
        z, cs, c_new_in, grad_h, grad_c, d_z, d_c, rows, n = self.function(
            "ember_lstm_cell_backward",
            [self.ptr, self.ptr, self.ptr, self.ptr, self.ptr, self.ptr, self.ptr, self.i64, self.i64],
        )
        b, k = self.b, self.c
        four = self.ir.Constant(self.i64, 4)

        def row(r):
            def col(j):
                i, f, g, o, c = self._gates(z, cs, r, n, j)
                tc = self._tanh(self.load(self.row(c_new_in, r, n), j))
                gh = self.load(self.row(grad_h, r, n), j)
                dc = b.fadd(self.load(self.row(grad_c, r, n), j), b.fmul(b.fmul(gh, o), b.fsub(k(1.0), b.fmul(tc, tc))))
                dz = self.row(d_z, r, b.mul(n, four))
                grads = (
                    b.fmul(b.fmul(dc, g), b.fmul(i, b.fsub(k(1.0), i))),
                    b.fmul(b.fmul(dc, c), b.fmul(f, b.fsub(k(1.0), f))),
                    b.fmul(b.fmul(dc, i), b.fsub(k(1.0), b.fmul(g, g))),
                    b.fmul(b.fmul(gh, tc), b.fmul(o, b.fsub(k(1.0), o))),
                )
                for q, value in enumerate(grads):
                    self.store(value, dz, b.add(b.mul(n, self.ir.Constant(self.i64, q)), j))
                self.store(b.fmul(dc, f), self.row(d_c, r, n), j)

            self.loop(n, col)

        self.loop(rows, row)
        b.ret_void()
