"""The kernel layer's op table (ember.backend.kernel.op_table): every printer spells
every float function from it, so each entry must name something that exists."""

from __future__ import annotations

from ember.backend.cube import wgsl
from ember.backend.kernel.llvm.mathlib import MathLib
from ember.backend.kernel.op_table import BINARY_MATH, KERNEL_MATH, LOWERED_UNARY, OWN_UNARY, UNARY_MATH
from ember.backend.ops import UnaryOp

# WGSL's built-in float functions the table uses (the rest must be helpers).
_WGSL_BUILTINS = {
    "abs",
    "exp",
    "log",
    "sqrt",
    "sin",
    "cos",
    "tan",
    "cosh",
    "log2",
    "exp2",
    "round",
    "floor",
    "ceil",
    "trunc",
}


def test_every_float_unary_op_is_a_table_function_or_spelled_by_each_printer():
    assert LOWERED_UNARY["f"] <= set(UNARY_MATH) | OWN_UNARY
    assert not set(UNARY_MATH) & OWN_UNARY
    assert set(UnaryOp) - {UnaryOp.BITWISE_NOT} == LOWERED_UNARY["f"]


def test_every_entry_names_an_existing_function():
    for fn in [*UNARY_MATH.values(), *BINARY_MATH.values(), *KERNEL_MATH.values()]:
        assert fn.c.isidentifier()
        if fn.llvm_f32 is not None:
            assert callable(getattr(MathLib, fn.llvm_f32, None)), fn
        if fn.llvm_intrinsic is not None:
            assert fn.llvm_intrinsic.startswith("llvm."), fn
        assert fn.wgsl in _WGSL_BUILTINS or fn.wgsl in wgsl.HELPERS, fn


def test_the_printers_spell_table_functions_from_the_table():
    import numpy as np

    from ember.backend.cuda.lowering import binary_code, unary_code

    for op, fn in [*UNARY_MATH.items(), *KERNEL_MATH.items()]:
        assert wgsl.UNARY[op]["f32"] == f"{fn.wgsl}({{a}})"
        code = unary_code(op, "x", np.dtype(np.float64))
        assert code.startswith(f"{fn.c}("), code
    for bop, fn in BINARY_MATH.items():
        assert wgsl.BINARY[bop]["f32"] == f"{fn.wgsl}({{a}}, {{b}})"
        assert binary_code(bop, "x", "y", np.dtype(np.float32)) == f"{fn.c}f(x, y)"


def test_kernel_functions_are_spelled_by_every_printer():
    """The C and WGSL spellings of the kernel-only functions exist in the sources the
    printers prepend (the CUDA prelude, the WGSL helpers a kernel pulls in)."""
    import numpy as np

    from ember.backend.cuda.lowering import unary_code
    from ember.backend.cuda.prelude import PRELUDE

    for op, fn in KERNEL_MATH.items():
        assert unary_code(op, "x", np.dtype(np.float32)) == f"{fn.c}f(x)"
        assert f" {fn.c}f(float" in PRELUDE and f" {fn.c}(double" in PRELUDE, fn
        code = wgsl.UNARY[op]["f32"].format(a="x")
        assert f"fn {fn.wgsl}(" in wgsl.helpers_for(code), fn
