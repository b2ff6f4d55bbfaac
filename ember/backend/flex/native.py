"""flex's native kernels: the few float32 loops whose numpy form costs many passes
over memory (exact GELU and its gradient, the ReLU gradient, row softmax, layer norm and its gradient, the LSTM
cell and its gradient), written as kernel-IR row programs
(:class:`~ember.backend.kernel.steps.RowProgram`: sizes are arguments, several passes
share the loop over rows; :mod:`ember.backend.flex.row_kernels`,
:mod:`ember.backend.flex.native_rnn`), printed by the kernel layer's LLVM printer
(:mod:`ember.backend.kernel.llvm.row_program`) and compiled once per process for the
host CPU by its JIT (llvmlite is a runtime dependency; the machine code is kept in the
object cache), so that the loop vectoriser widens them to its SIMD width.

Each kernel takes contiguous float32 arrays. :func:`kernels` returns ``None`` when
llvmlite cannot compile for this machine (or ``EMBER_FLEX_NATIVE=0``), and for arrays
too small to repay the compilation (:data:`MIN_ELEMENTS`); flex then runs its numpy
versions of the same formulas. The math is the kernel layer's
(:class:`~ember.backend.kernel.llvm.mathlib.MathLib`) and matches those versions:
GELU through the normal tail of Abramowitz & Stegun 7.1.26 and ``exp`` with results
below the smallest normal float flushed to 0 (the op table's ``NORMAL_TAIL`` and
``EXP_FLUSHED``, :class:`~ember.backend.kernel.op_table.KernelFn`), within about one
float32 ulp.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.kernel.llvm.arrays import data_pointer

if TYPE_CHECKING:
    from ember.backend.kernel.steps import RowProgram

#: Environment variable: ``0`` turns the native kernels off (numpy only).
NATIVE_ENV = "EMBER_FLEX_NATIVE"

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}


@dataclass(frozen=True)
class Kernels:
    """ctypes entry points of the compiled kernels (and the engine that owns them)."""

    engine: Any
    gelu: Any
    gelu_backward: Any
    relu_backward: Any
    softmax_rows: Any
    layer_norm: Any
    layer_norm_backward: Any
    lstm_cell: Any
    lstm_cell_backward: Any


#: Arrays with fewer elements run the numpy versions: compiling the kernels costs about
#: half a second once per process, which small tensors would not win back.
MIN_ELEMENTS = 16384


def kernels(size: int | None = None) -> Kernels | None:
    """The compiled kernels, built on first use; ``None`` where they cannot be, or for
    an array of ``size`` elements below :data:`MIN_ELEMENTS`."""
    if size is not None and size < MIN_ELEMENTS:
        return None
    if "kernels" in _STATE:
        return _STATE["kernels"]
    with _LOCK:
        if "kernels" not in _STATE:
            _STATE["kernels"] = _build() if os.environ.get(NATIVE_ENV, "1") != "0" else None
    return _STATE["kernels"]


#: An array's data pointer, as flex's kernels take their arguments.
address = data_pointer


# ---------------------------------------------------------------------- compiling


def _build() -> Kernels | None:
    try:
        from ember.backend.kernel.llvm import jit
    except ImportError:  # pragma: no cover - llvmlite is a runtime dependency
        return None
    programs = _programs()
    try:
        compiled = jit.compile_module(
            lambda: _module(programs),
            [p.name for p in programs],
            unroll=True,
            codegen_opt=3,
            cache=True,
            recipe=("flex.native", tuple(p.name for p in programs)),
        )
    except Exception:  # an unsupported host or llvmlite version: numpy instead
        return None
    fns = {p.name: ctypes.CFUNCTYPE(None, *_signature(p))(compiled.addresses[p.name]) for p in programs}
    return Kernels(compiled.engine, *(fns[f"ember_{name}"] for name in list(Kernels.__dataclass_fields__)[1:]))


def _programs() -> list[RowProgram]:
    """Every kernel as a row program, in :class:`Kernels` order."""
    from ember.backend.flex import native_rnn, row_kernels

    return row_kernels.programs() + native_rnn.programs()


def _signature(program: RowProgram) -> list[Any]:
    """A row program's ctypes argument types: its pointers, sizes and scalars."""
    scalar = {np.dtype(np.float32): ctypes.c_float, np.dtype(np.int32): ctypes.c_int32}
    sizes = [ctypes.c_int64] * (2 if program.by_rows else 1)
    return [ctypes.c_void_p] * len(program.buffers) + sizes + [scalar[d] for d in program.scalars]


def _module(programs: list[RowProgram] | None = None) -> str:
    """The kernels' module: every row program printed by the kernel layer's LLVM printer
    (the same text in every process, so the object cache keeps its machine code)."""
    from llvmlite import ir

    from ember.backend.kernel.llvm import jit
    from ember.backend.kernel.llvm.row_program import print_programs

    module = ir.Module(name="ember_flex_native")
    print_programs(module, _programs() if programs is None else programs, jit.vector_width())
    return str(module)
