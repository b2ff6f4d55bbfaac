"""WGSL building blocks shared by the kernel generators.

* :data:`HELPERS`: functions a kernel body may call; :func:`helpers_for` pulls in
  the ones a source uses (and what they use), so a kernel carries only its own.
* :data:`UNARY` / :data:`BINARY`: each op of the backend protocol as a WGSL
  template per compute type (``f32``, ``i32``, ``bool``), ``{a}``/``{b}`` its operands.
* :func:`bindings`, :func:`strided_offsets`: declarations and index arithmetic.

WGSL lets an implementation assume there are no NaNs or infinities, so NaN tests,
NaN-propagating ``max``/``min`` and the like work on the bits, never on ``x != x``.

Compute types: ``f32``, ``i32``, ``bool`` and ``i64`` (int64 on two 32-bit words, see
:mod:`ember.backend.cube.int64`; its templates call the ``*_l`` helpers).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ember.backend.cube import complex64, int64
from ember.backend.cube.dtypes import Storage
from ember.backend.kernel.op_table import BINARY_MATH, KERNEL_MATH, UNARY_MATH
from ember.backend.ops import BOOL_RESULT_BINARY, BOOL_RESULT_UNARY, BinaryOp, UnaryOp

MAX_RANK = 8
WORKGROUP = 256

HELPERS: dict[str, str] = {
    "nan_f": "fn nan_f() -> f32 { return bitcast<f32>(0x7fc00000u); }",
    "inf_f": "fn inf_f() -> f32 { return bitcast<f32>(0x7f800000u); }",
    "is_nan_f": "fn is_nan_f(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }",
    "is_inf_f": "fn is_inf_f(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }",
    "is_finite_f": "fn is_finite_f(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) < 0x7f800000u; }",
    "max_f": """fn max_f(a: f32, b: f32) -> f32 {
    if (is_nan_f(a)) { return a; }
    if (is_nan_f(b)) { return b; }
    return max(a, b);
}""",
    "min_f": """fn min_f(a: f32, b: f32) -> f32 {
    if (is_nan_f(a)) { return a; }
    if (is_nan_f(b)) { return b; }
    return min(a, b);
}""",
    "sign_f": """fn sign_f(x: f32) -> f32 {
    // On the bits: compilers (lavapipe) fold the float select into a copysign, giving -0.0
    // for +0.0. NaN and zeros give +0.0 (Burn's and PyTorch's sign).
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) == 0u || is_nan_f(x)) { return bitcast<f32>(0u); }
    return bitcast<f32>((b & 0x80000000u) | 0x3f800000u);
}""",
    "copysign_f": """fn copysign_f(a: f32, b: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(a) & 0x7fffffffu) | (bitcast<u32>(b) & 0x80000000u));
}""",
    "asin_f": """fn asin_f(x: f32) -> f32 {
    if (is_nan_f(x) || abs(x) > 1.0) { return nan_f(); }
    return atan2(x, sqrt((1.0 - x) * (1.0 + x)));
}""",
    "acos_f": """fn acos_f(x: f32) -> f32 {
    if (is_nan_f(x) || abs(x) > 1.0) { return nan_f(); }
    return atan2(sqrt((1.0 - x) * (1.0 + x)), x);
}""",
    "asinh_f": """fn asinh_f(x: f32) -> f32 {
    // log1p form near 0 (no cancellation), log(2|x|) far out (no overflow of x * x).
    if (is_nan_f(x)) { return x; }
    let a = abs(x);
    var r: f32;
    if (a < 0.125) {
        let a2 = a * a;
        r = a * (1.0 + a2 * (-1.0 / 6.0 + a2 * (0.075 + a2 * (-15.0 / 336.0 + a2 * (105.0 / 3456.0)))));
    } else if (a > 1.0e9) {
        r = log(a) + 0.6931471805599453;
    } else {
        r = log1p_f(a + a * a / (1.0 + sqrt(1.0 + a * a)));
    }
    return select(r, -r, x < 0.0);
}""",
    "acosh_f": """fn acosh_f(x: f32) -> f32 {
    if (is_nan_f(x) || x < 1.0) { return nan_f(); }
    if (x > 1.0e9) { return log(x) + 0.6931471805599453; }
    let t = x - 1.0;
    return log1p_f(t + sqrt(t * (x + 1.0)));
}""",
    "atan_f": """fn atan_f(x: f32) -> f32 {
    // NaN stays NaN (lavapipe's atan gives 0); near 0 a series, which keeps the sign of
    // a zero and every digit of a small x (the GPU's atan is off by 2e-5 relative there).
    if (is_nan_f(x)) { return x; }
    if (abs(x) < 0.125) {
        let x2 = x * x;
        return x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (0.2 + x2 * (-1.0 / 7.0 + x2 * (1.0 / 9.0 - x2 / 11.0)))));
    }
    return atan(x);
}""",
    "atanh_f": """fn atanh_f(x: f32) -> f32 {
    if (is_nan_f(x) || abs(x) > 1.0) { return nan_f(); }
    if (abs(x) < 0.125) {
        let x2 = x * x;
        return x * (1.0 + x2 * (1.0 / 3.0 + x2 * (0.2 + x2 * (1.0 / 7.0 + x2 * (1.0 / 9.0 + x2 / 11.0)))));
    }
    return 0.5 * log1p_f(2.0 * x / (1.0 - x));
}""",
    "log10_f": """fn log10_f(x: f32) -> f32 {
    // log2(x) * log10(2), snapped to k at the exact powers 10^k (k = 0..10) of float32.
    let r = log2(x) * 0.30102999566398120;
    let k = round(r);
    if (abs(r - k) < 1.0e-5 && k >= 0.0 && k <= 10.0) {
        var p = 1.0;
        for (var i = 0; i < i32(k); i++) { p = p * 10.0; }
        if (p == x) { return k; }
    }
    return r;
}""",
    "logaddexp_f": """fn logaddexp_f(a: f32, b: f32) -> f32 {
    if (is_nan_f(a)) { return a; }
    if (is_nan_f(b)) { return b; }
    let m = max(a, b);
    if (is_inf_f(m)) { return m; }
    return m + log1p_f(exp(-abs(a - b)));
}""",
    "log1p_f": """fn log1p_f(x: f32) -> f32 {
    // Below -1 (-inf included) NaN, at -1 -inf, as C's log1p; the tests are on the bits
    // and explicit because WGSL's log leaves a negative argument undefined.
    if (is_nan_f(x) || x < -1.0) { return nan_f(); }
    if (x == -1.0) { return -inf_f(); }
    // Near 0 a series in s = x / (2 + x) (log1p(x) = 2 atanh(s)): GPU logs may be off by
    // 2^-21 absolute near 1 (the WGSL bound), which is every digit of a small result.
    if (abs(x) < 0.0625) {
        let s = x / (2.0 + x);
        let s2 = s * s;
        return 2.0 * s * (1.0 + s2 * (1.0 / 3.0 + s2 * (0.2 + s2 / 7.0)));
    }
    let u = 1.0 + x;
    if (u == 1.0) { return x; }
    if (is_inf_f(u)) { return u; }
    return log(u) * (x / (u - 1.0));
}""",
    "expm1_f": """fn expm1_f(x: f32) -> f32 {
    if (abs(x) < 1e-5) { return x + 0.5 * x * x; }
    if (x > 88.0) { return exp(x); }
    let u = exp(x);
    if (u == 1.0) { return x; }
    let um1 = u - 1.0;
    if (um1 == -1.0) { return -1.0; }
    return um1 * x / log(u);
}""",
    "tanh_f": """fn tanh_f(x: f32) -> f32 {
    if (is_nan_f(x)) { return x; }
    return tanh(clamp(x, -15.0, 15.0));
}""",
    "sinh_f": """fn sinh_f(x: f32) -> f32 {
    if (abs(x) < 0.5) { return 0.5 * (expm1_f(x) - expm1_f(-x)); }
    return sinh(x);
}""",
    "erf_f": """fn erf_f(x: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7), Taylor series near 0.
    let a = abs(x);
    if (a < 0.5) {
        let x2 = x * x;
        return 1.1283791670955126 * x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (0.1 + x2 * (-1.0 / 42.0 + x2 / 216.0))));
    }
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let r = 1.0 - poly * exp(-a * a);
    if (is_nan_f(x)) { return x; }
    return select(r, -r, x < 0.0);
}""",
    "fmod_f": """fn fmod_f(x: f32, y: f32) -> f32 {
    // C's fmod, exact (musl's fmodf on the bits: binary long division of the
    // significands), so that no rounding of x / y leaks into a remainder.
    let ux = bitcast<u32>(x);
    var uy = bitcast<u32>(y);
    var ex = i32((ux >> 23u) & 0xffu);
    var ey = i32((uy >> 23u) & 0xffu);
    let sx = ux & 0x80000000u;
    if ((uy << 1u) == 0u || is_nan_f(y) || ex == 0xff) { return nan_f(); }
    if ((ux << 1u) <= (uy << 1u)) {
        if ((ux << 1u) == (uy << 1u)) { return bitcast<f32>(sx); }
        return x;
    }
    var mx = ux;
    if (ex == 0) {
        var i = mx << 9u;
        loop { if ((i >> 31u) != 0u) { break; } ex = ex - 1; i = i << 1u; }
        mx = mx << u32(1 - ex);
    } else {
        mx = (mx & 0x007fffffu) | 0x00800000u;
    }
    if (ey == 0) {
        var i = uy << 9u;
        loop { if ((i >> 31u) != 0u) { break; } ey = ey - 1; i = i << 1u; }
        uy = uy << u32(1 - ey);
    } else {
        uy = (uy & 0x007fffffu) | 0x00800000u;
    }
    loop {
        if (ex <= ey) { break; }
        let i = mx - uy;
        if ((i >> 31u) == 0u) {
            if (i == 0u) { return bitcast<f32>(sx); }
            mx = i;
        }
        mx = mx << 1u;
        ex = ex - 1;
    }
    let i = mx - uy;
    if ((i >> 31u) == 0u) {
        if (i == 0u) { return bitcast<f32>(sx); }
        mx = i;
    }
    loop { if ((mx >> 23u) != 0u) { break; } mx = mx << 1u; ex = ex - 1; }
    if (ex > 0) {
        mx = (mx - 0x00800000u) | (u32(ex) << 23u);
    } else {
        mx = mx >> u32(1 - ex);
    }
    return bitcast<f32>(mx | sx);
}""",
    "rem_f": """fn rem_f(a: f32, b: f32) -> f32 {
    // Python's sign rule: the exact C remainder, moved by one divisor when its sign
    // differs from the divisor's (numpy's npy_divmod).
    var r = fmod_f(a, b);
    if (is_nan_f(r)) { return r; }
    if ((bitcast<u32>(r) << 1u) == 0u) { return bitcast<f32>(bitcast<u32>(b) & 0x80000000u); }
    if ((r < 0.0) != (b < 0.0)) { r = r + b; }
    return r;
}""",
    "floordiv_f": """fn floordiv_f(a: f32, b: f32) -> f32 {
    // numpy's npy_divmod: the quotient from the exact remainder, then rounded.
    if (b == 0.0) { return a / b; }
    let m = fmod_f(a, b);
    var div = (a - m) / b;
    if (m != 0.0 && ((b < 0.0) != (m < 0.0))) { div = div - 1.0; }
    if (div == 0.0) { return bitcast<f32>((bitcast<u32>(a) ^ bitcast<u32>(b)) & 0x80000000u); }
    var q = floor(div);
    if (div - q > 0.5) { q = q + 1.0; }
    return q;
}""",
    "pow_f": """fn pow_f(a: f32, b: f32) -> f32 {
    // C's pow (numpy's, PyTorch's) at its special values, which WGSL's pow and exp2/log2
    // leave undefined: 1 for b = 0 and for a = 1 (NaN b included), else NaN in -> NaN out;
    // |a| = 1 with b = +-inf gives 1; a signed zero or infinity keeps its sign under an
    // odd integer b (pow(-0, -1) = -inf, pow(-0, 3) = -0).
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (is_nan_f(a) || is_nan_f(b)) { return nan_f(); }
    let ab = abs(a);
    let neg_a = (bitcast<u32>(a) & 0x80000000u) != 0u;
    let b_int = trunc(b) == b;
    let odd = b_int && abs(b) < 16777216.0 && (i32(abs(b)) & 1) == 1;
    if (is_inf_f(b)) {
        if (ab == 1.0) { return 1.0; }
        if ((ab < 1.0) == (b < 0.0)) { return inf_f(); }
        return 0.0;
    }
    if (a == 0.0 || is_inf_f(a)) {
        // 0^b is 0 for b > 0 and inf for b < 0; inf^b the other way round.
        var m = 0u;
        if ((b > 0.0) == is_inf_f(a)) { m = 0x7f800000u; }
        if (neg_a && odd) { m = m | 0x80000000u; }
        return bitcast<f32>(m);
    }
    var r = exp2(b * log2(ab));
    if (b == 1.0) { r = ab; }
    if (b == 2.0) { r = ab * ab; }
    if (b == 0.5) { r = sqrt(ab); }
    if (neg_a) {
        if (!b_int) { return nan_f(); }
        return select(r, -r, odd);
    }
    return r;
}""",
    "floordiv_i": """fn floordiv_i(a: i32, b: i32) -> i32 {
    if (b == 0) { return 0; }
    var q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) { q = q - 1; }
    return q;
}""",
    "rem_i": """fn rem_i(a: i32, b: i32) -> i32 {
    if (b == 0) { return 0; }
    var r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) { r = r + b; }
    return r;
}""",
    "pow_i": """fn pow_i(a: i32, b: i32) -> i32 {
    if (b < 0) {
        if (a == 1) { return 1; }
        if (a == -1) { return select(-1, 1, (b & 1) == 0); }
        return 0;
    }
    var base = a;
    var e = u32(b);
    var r = 1;
    loop {
        if ((e & 1u) == 1u) { r = r * base; }
        e = e >> 1u;
        if (e == 0u) { break; }
        base = base * base;
    }
    return r;
}""",
    "atan2_f": """fn atan2_f(y: f32, x: f32) -> f32 {
    // numpy's (C99's) special values; WGSL leaves atan2(0, 0) and infinities undefined.
    if (is_nan_f(y) || is_nan_f(x)) { return nan_f(); }
    let sy = select(1.0, -1.0, (bitcast<u32>(y) & 0x80000000u) != 0u);
    let x_neg = (bitcast<u32>(x) & 0x80000000u) != 0u;
    let pi = 3.14159265358979;
    if (y == 0.0) { return select(y, sy * pi, x_neg); }
    if (is_inf_f(y)) {
        if (is_inf_f(x)) { return sy * select(0.25, 0.75, x_neg) * pi; }
        return sy * 0.5 * pi;
    }
    let zero = bitcast<f32>(bitcast<u32>(y) & 0x80000000u);  // 0 with y's sign
    if (is_inf_f(x)) { return select(zero, sy * pi, x_neg); }
    if (x == 0.0) { return sy * 0.5 * pi; }
    return atan2(y, x);
}""",
    "bf16_word": """fn bf16_word(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return 0x7fc0u; }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}""",
}

HELPERS.update(int64.HELPERS)
HELPERS.update(complex64.HELPERS)

_F = "f32"
_I = "i32"
_B = "bool"
_L = "i64"
_C = complex64.C

# op -> {compute type: template}
UNARY: dict[str, dict[str, str]] = {
    UnaryOp.NEG: {_F: "(-{a})", _I: "(-{a})", _L: "neg_l({a})"},
    UnaryOp.ABS: {_I: "abs({a})", _L: "abs_l({a})"},
    UnaryOp.RSQRT: {_F: "(1.0 / sqrt({a}))"},
    UnaryOp.RECIP: {_F: "(1.0 / {a})"},
    UnaryOp.SIGN: {_F: "sign_f({a})", _I: "sign({a})", _L: "sign_l({a})"},
    UnaryOp.ROUND: {_I: "{a}", _L: "{a}"},
    UnaryOp.FLOOR: {_I: "{a}", _L: "{a}"},
    UnaryOp.CEIL: {_I: "{a}", _L: "{a}"},
    UnaryOp.TRUNC: {_I: "{a}", _L: "{a}"},
    UnaryOp.SQUARE: {_F: "({a} * {a})", _I: "({a} * {a})", _L: "mul_l({a}, {a})"},
    UnaryOp.IS_NAN: {_F: "is_nan_f({a})", _I: "false", _B: "false", _L: "false"},
    UnaryOp.IS_INF: {_F: "is_inf_f({a})", _I: "false", _B: "false", _L: "false"},
    UnaryOp.IS_FINITE: {_F: "is_finite_f({a})", _I: "true", _B: "true", _L: "true"},
    UnaryOp.LOGICAL_NOT: {_B: "(!{a})", _F: "({a} == 0.0)", _I: "({a} == 0)", _L: "is_zero_l({a})"},
    UnaryOp.BITWISE_NOT: {_I: "(~{a})", _B: "(!{a})", _L: "(~{a})"},
    "relu": {_F: "select(max({a}, 0.0), {a}, is_nan_f({a}))", _I: "max({a}, 0)", _L: f"max_l({{a}}, {int64.ZERO})"},
    "sigmoid": {_F: "sigmoid_f({a})"},
}
HELPERS["sigmoid_f"] = """fn sigmoid_f(x: f32) -> f32 {
    let e = exp(-abs(x));
    return select(e / (1.0 + e), 1.0 / (1.0 + e), x >= 0.0);
}"""

HELPERS["exp_flushed_f"] = """fn exp_flushed_f(x: f32) -> f32 {
    if (x < -87.33654) { return 0.0; }
    if (x > 88.72283) { return inf_f(); }
    return exp(x);
}"""
HELPERS["normal_tail_f"] = """fn normal_tail_f(z: f32) -> f32 {
    let t = 1.0 / (z * 0.23164188826636045 + 1.0);
    let poly = ((((0.5307027145 * t + -0.7265760135) * t + 0.7107068705) * t + -0.142248368) * t + 0.127414796) * t;
    return poly * exp_flushed_f(z * z * -0.5);
}"""

BINARY: dict[str, dict[str, str]] = {
    BinaryOp.ADD: {_F: "({a} + {b})", _I: "({a} + {b})", _B: "({a} || {b})", _L: "add_l({a}, {b})"},
    BinaryOp.SUB: {_F: "({a} - {b})", _I: "({a} - {b})", _L: "sub_l({a}, {b})"},
    BinaryOp.MUL: {_F: "({a} * {b})", _I: "({a} * {b})", _B: "({a} && {b})", _L: "mul_l({a}, {b})"},
    BinaryOp.DIV: {_F: "({a} / {b})", _I: "floordiv_i({a}, {b})", _L: "floordiv_l({a}, {b})"},
    BinaryOp.REMAINDER: {_F: "rem_f({a}, {b})", _I: "rem_i({a}, {b})", _L: "rem_l({a}, {b})"},
    BinaryOp.FLOOR_DIV: {_F: "floordiv_f({a}, {b})", _I: "floordiv_i({a}, {b})", _L: "floordiv_l({a}, {b})"},
    BinaryOp.POW: {_I: "pow_i({a}, {b})", _L: "pow_l({a}, {b})"},
    BinaryOp.MAXIMUM: {_F: "max_f({a}, {b})", _I: "max({a}, {b})", _B: "({a} || {b})", _L: "max_l({a}, {b})"},
    BinaryOp.MINIMUM: {_F: "min_f({a}, {b})", _I: "min({a}, {b})", _B: "({a} && {b})", _L: "min_l({a}, {b})"},
    BinaryOp.EQ: {_F: "({a} == {b})", _I: "({a} == {b})", _B: "({a} == {b})", _L: "eq_l({a}, {b})"},
    BinaryOp.NE: {_F: "(!({a} == {b}))", _I: "({a} != {b})", _B: "({a} != {b})", _L: "(!eq_l({a}, {b}))"},
    BinaryOp.GT: {_F: "({a} > {b})", _I: "({a} > {b})", _B: "({a} && !{b})", _L: "lt_l({b}, {a})"},
    BinaryOp.GE: {_F: "({a} >= {b})", _I: "({a} >= {b})", _B: "({a} || !{b})", _L: "(!lt_l({a}, {b}))"},
    BinaryOp.LT: {_F: "({a} < {b})", _I: "({a} < {b})", _B: "(!{a} && {b})", _L: "lt_l({a}, {b})"},
    BinaryOp.LE: {_F: "({a} <= {b})", _I: "({a} <= {b})", _B: "(!{a} || {b})", _L: "(!lt_l({b}, {a}))"},
    BinaryOp.LOGICAL_AND: {_B: "({a} && {b})"},
    BinaryOp.LOGICAL_OR: {_B: "({a} || {b})"},
    BinaryOp.LOGICAL_XOR: {_B: "({a} != {b})"},
    BinaryOp.BITWISE_AND: {_I: "({a} & {b})", _B: "({a} && {b})", _L: "({a} & {b})"},
    BinaryOp.BITWISE_OR: {_I: "({a} | {b})", _B: "({a} || {b})", _L: "({a} | {b})"},
    BinaryOp.BITWISE_XOR: {_I: "({a} ^ {b})", _B: "({a} != {b})", _L: "({a} ^ {b})"},
    # Shifts by the width or more (or by a negative amount) give 0 / the sign, as numpy.
    BinaryOp.LEFT_SHIFT: {_I: "select({a} << u32({b}), 0, u32({b}) >= 32u)", _L: "shl_by_l({a}, {b})"},
    BinaryOp.RIGHT_SHIFT: {_I: "({a} >> min(u32({b}), 31u))", _L: "shr_by_l({a}, {b})"},
}
# The float functions: one spelling per printer in the kernel layer's op table.
for _uop, _fn in [*UNARY_MATH.items(), *KERNEL_MATH.items()]:
    UNARY.setdefault(_uop, {})[_F] = f"{_fn.wgsl}({{a}})"
for _bop, _fn in BINARY_MATH.items():
    BINARY.setdefault(_bop, {})[_F] = f"{_fn.wgsl}({{a}}, {{b}})"
for _op, _template in complex64.UNARY.items():
    UNARY.setdefault(_op, {})[_C] = _template
for _op, _template in complex64.BINARY.items():
    BINARY[_op][_C] = _template
BINARY["complex"] = {_F: "c64({a}, {b})"}
BOOL_RESULT = BOOL_RESULT_BINARY | BOOL_RESULT_UNARY
#: Ops whose result type is not their operands' (besides the bool-valued ones).
RESULT_TYPE = {**{op: _F for op in complex64.REAL_RESULT}, "complex": _C}

ZERO = {_F: "0.0", _I: "0", _B: "false", _L: int64.ZERO, _C: complex64.ZERO}
#: The smallest and largest value of each int compute type (identities of max/min).
INT_MIN = {_I: "i32(-2147483647 - 1)", _L: int64.MIN}
INT_MAX = {_I: "2147483647", _L: int64.MAX}


def convert(expr: str, src: str, dst: str) -> str:
    """``expr`` of compute type ``src`` as ``dst`` (floats to ints truncate; nonzero is true)."""
    if src == dst:
        return expr
    if _C in (src, dst):  # a real value is the real part; complex to real keeps the real part
        if dst == _C:
            return f"c64({convert(expr, src, _F)}, 0.0)"
        if dst == _B:
            return f"any({expr} != {complex64.ZERO})"
        return convert(f"({expr}).x", _F, dst)
    if _L in (src, dst):
        return int64.convert(expr, src, dst)
    if dst == _B:
        if src == _F:  # on the bits: NaN is true, whatever the compiler assumes about NaN
            return f"((bitcast<u32>({expr}) & 0x7fffffffu) != 0u)"
        return f"({expr} != {ZERO[src]})"
    if src == _B:
        return f"select({ZERO[dst]}, {'1.0' if dst == _F else '1'}, {expr})"
    return f"{dst}({expr})"


def helpers_for(code: str) -> str:
    """The helper functions ``code`` calls, with their own dependencies, in order."""
    seen: list[str] = []
    visiting: set[str] = set()

    def visit(text: str) -> None:
        for name in re.findall(r"\b([a-z0-9_]+_(?:f|i|l|word))\(", text):
            if name in HELPERS and name not in seen and name not in visiting:
                visiting.add(name)
                visit(HELPERS[name])
                seen.append(name)

    visit(code)
    return "\n".join(HELPERS[n] for n in seen)


def bindings(inputs: Sequence[Storage | str], outputs: Sequence[Storage | str]) -> str:
    """Declarations of ``in0..``, ``out0..`` (storages or raw WGSL element types) and
    ``info``, with the ``i64`` alias (unused aliases cost nothing)."""
    lines = []
    elems = [s if isinstance(s, str) else s.wgsl for s in (*inputs, *outputs)]
    if any("f16" in e for e in elems):
        lines.append("enable f16;")
    lines.append(int64.ALIAS)
    lines.append(complex64.ALIAS)
    for i, e in enumerate(elems[: len(inputs)]):
        lines.append(f"@group(0) @binding({i}) var<storage, read> in{i}: array<{e}>;")
    for j, e in enumerate(elems[len(inputs) :]):
        lines.append(f"@group(0) @binding({len(inputs) + j}) var<storage, read_write> out{j}: array<{e}>;")
    lines.append("@group(1) @binding(0) var<storage, read> info: array<u32>;")
    return "\n".join(lines)


def load(storage: Storage, array: str, index: str) -> str:
    return storage.load.format(x=f"{array}[{index}]")


def store(storage: Storage, value: str) -> str:
    return storage.store.format(v=value)


def main_linear(body: str, workgroup: int = WORKGROUP) -> str:
    """A ``main`` whose ``gi`` is the linear invocation index over a 2-D grid of workgroups."""
    return (
        f"@compute @workgroup_size({workgroup})\n"
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n"
        f"    let gi = gid.x + gid.y * nwg.x * {workgroup}u;\n"
        f"{body}\n}}\n"
    )


def main_groups(body: str, workgroup: int = WORKGROUP) -> str:
    """A ``main`` with ``wid`` the linear workgroup index and ``lid`` the local index."""
    return (
        f"@compute @workgroup_size({workgroup})\n"
        "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
        "        @builtin(local_invocation_index) lid: u32) {\n"
        "    let wid = wg.x + wg.y * nwg.x;\n"
        f"{body}\n}}\n"
    )


def strided_offsets(index: str, rank: str, shape_at: int, operands: list[tuple[str, int]], tag: str = "") -> str:
    """Statements that set ``var`` offsets for ``operands`` (name, info position of
    ``[offset, strides...]``) at the row-major position ``index`` of the shape held at
    ``info[shape_at..]`` with ``rank`` dims."""
    t = f"_{tag}"
    lines = [f"    var rem{t} = {index};"]
    for name, pos in operands:
        lines.append(f"    var {name}: i32 = bitcast<i32>(info[{pos}u]);")
    lines.append(f"    for (var k{t} = {rank}; k{t} > 0u; k{t}--) {{")
    lines.append(f"        let d{t} = k{t} - 1u;")
    lines.append(f"        let sz{t} = info[{shape_at}u + d{t}];")
    lines.append(f"        let c{t} = i32(rem{t} % sz{t});")
    lines.append(f"        rem{t} = rem{t} / sz{t};")
    for name, pos in operands:
        lines.append(f"        {name} += c{t} * bitcast<i32>(info[{pos + 1}u + d{t}]);")
    lines.append("    }")
    return "\n".join(lines)


def info_scalar(pos: int, ctype: str) -> str:
    """The scalar at ``info[pos]`` (and ``info[pos + 1]`` for ``i64``) as ``ctype``."""
    if ctype == _F:
        return f"bitcast<f32>(info[{pos}u])"
    if ctype == _I:
        return f"bitcast<i32>(info[{pos}u])"
    if ctype == _L:
        return f"i64(info[{pos}u], info[{pos + 1}u])"
    if ctype == _C:
        return f"c64(bitcast<f32>(info[{pos}u]), bitcast<f32>(info[{pos + 1}u]))"
    return f"(info[{pos}u] != 0u)"


def literal(value: int | float | bool, ctype: str) -> str:
    """An exact WGSL constant of compute type ``ctype`` (floats and ints by their bits)."""
    if ctype == _B:
        return "true" if value else "false"
    if ctype == _F:
        with np.errstate(over="ignore"):
            bits = int(np.array(value, np.float32).view(np.uint32))
        return f"bitcast<f32>({bits:#010x}u)"
    if ctype == _I:
        return f"bitcast<i32>({int(value) & 0xFFFF_FFFF:#010x}u)"
    if ctype == _C:
        z = complex(value)
        return f"c64({literal(z.real, _F)}, {literal(z.imag, _F)})"
    bits = int(value) & 0xFFFF_FFFF_FFFF_FFFF
    return f"i64({bits & 0xFFFF_FFFF:#010x}u, {bits >> 32:#010x}u)"


def index_value(storage: Storage, array: str, index: str) -> str:
    """An element of an index tensor (int64, int32 or uint8) as ``i32``: indices are
    bounds-checked before launch, so the low word holds the whole value."""
    return convert(load(storage, array, index), storage.compute, _I)
