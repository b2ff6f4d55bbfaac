"""complex64 on the GPU: one ``vec2<f32>`` (real, imaginary) per element.

Kernels hold a complex value as ``c64`` (a WGSL ``alias`` of ``vec2<f32>``, see
:data:`ALIAS`): addition, subtraction, negation and scaling by a real are the vector
ones; the helpers below give the rest (``cmul_f``, ``cdiv_f`` with Smith's scaling,
``cexp_f``, ``clog_f``, ``csqrt_f``, the trigonometric and hyperbolic functions).
:data:`UNARY` and :data:`BINARY` are their templates, merged into ``wgsl``'s tables
under the compute type ``c64``; ``real``/``imag``/``conj``/``cabs``/``angle`` are the
:class:`~ember.backend.ops.ComplexOp` kernels (``cabs``/``angle``/``real``/``imag``
give ``f32``) and ``complex`` builds a ``c64`` from two ``f32``.
"""

from __future__ import annotations

from ember.backend.ops import BinaryOp, UnaryOp

C = "c64"
ALIAS = "alias c64 = vec2<f32>;"
ZERO = "c64(0.0, 0.0)"

HELPERS: dict[str, str] = {
    "cmul_f": "fn cmul_f(a: c64, b: c64) -> c64 { return c64(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }",
    "cdiv_f": """fn cdiv_f(a: c64, b: c64) -> c64 {
    // Smith's algorithm: no overflow of |b|^2 for large b.
    if (abs(b.x) >= abs(b.y)) {
        let r = b.y / b.x;
        let d = b.x + b.y * r;
        return c64((a.x + a.y * r) / d, (a.y - a.x * r) / d);
    }
    let r = b.x / b.y;
    let d = b.x * r + b.y;
    return c64((a.x * r + a.y) / d, (a.y * r - a.x) / d);
}""",
    "cabs_f": """fn cabs_f(z: c64) -> f32 {
    // Scaled by the larger part: no overflow or underflow of the squares.
    let m = max(abs(z.x), abs(z.y));
    if (m == 0.0 || is_inf_f(m)) { return m; }
    let s = z / m;
    return m * sqrt(dot(s, s));
}""",
    "cexp_f": "fn cexp_f(z: c64) -> c64 { let e = exp(z.x); return c64(e * cos(z.y), e * sin(z.y)); }",
    "clog_f": "fn clog_f(z: c64) -> c64 { return c64(log(cabs_f(z)), atan2_f(z.y, z.x)); }",
    "csqrt_f": """fn csqrt_f(z: c64) -> c64 {
    // The principal root, from |z| without cancellation.
    let r = cabs_f(z);
    if (r == 0.0) { return c64(0.0, z.y); }
    let t = sqrt(0.5 * (r + abs(z.x)));
    if (z.x >= 0.0) { return c64(t, 0.5 * z.y / t); }
    return c64(0.5 * abs(z.y) / t, select(t, -t, (bitcast<u32>(z.y) & 0x80000000u) != 0u));
}""",
    "csin_f": "fn csin_f(z: c64) -> c64 { return c64(sin(z.x) * cosh(z.y), cos(z.x) * sinh_f(z.y)); }",
    "ccos_f": "fn ccos_f(z: c64) -> c64 { return c64(cos(z.x) * cosh(z.y), -sin(z.x) * sinh_f(z.y)); }",
    "csinh_f": "fn csinh_f(z: c64) -> c64 { return c64(sinh_f(z.x) * cos(z.y), cosh(z.x) * sin(z.y)); }",
    "ccosh_f": "fn ccosh_f(z: c64) -> c64 { return c64(cosh(z.x) * cos(z.y), sinh_f(z.x) * sin(z.y)); }",
    "ctan_f": "fn ctan_f(z: c64) -> c64 { return cdiv_f(csin_f(z), ccos_f(z)); }",
    "ctanh_f": """fn ctanh_f(z: c64) -> c64 {
    // tanh(x + iy) = (sinh 2x + i sin 2y) / (cosh 2x + cos 2y); saturates for large |x|.
    if (abs(z.x) > 20.0) { return c64(select(1.0, -1.0, z.x < 0.0), 0.0); }
    let d = cosh(2.0 * z.x) + cos(2.0 * z.y);
    return c64(sinh_f(2.0 * z.x) / d, sin(2.0 * z.y) / d);
}""",
    "cis_nan_f": "fn cis_nan_f(z: c64) -> bool { return is_nan_f(z.x) || is_nan_f(z.y); }",
    "cis_inf_f": "fn cis_inf_f(z: c64) -> bool { return is_inf_f(z.x) || is_inf_f(z.y); }",
    "cis_finite_f": "fn cis_finite_f(z: c64) -> bool { return is_finite_f(z.x) && is_finite_f(z.y); }",
}

_ONE = "c64(1.0, 0.0)"
UNARY: dict[str, str] = {
    UnaryOp.NEG: "(-{a})",
    UnaryOp.EXP: "cexp_f({a})",
    UnaryOp.EXPM1: f"(cexp_f({{a}}) - {_ONE})",
    UnaryOp.LOG: "clog_f({a})",
    UnaryOp.LOG1P: f"clog_f({{a}} + {_ONE})",
    UnaryOp.SQRT: "csqrt_f({a})",
    UnaryOp.RSQRT: f"cdiv_f({_ONE}, csqrt_f({{a}}))",
    UnaryOp.RECIP: f"cdiv_f({_ONE}, {{a}})",
    UnaryOp.SQUARE: "cmul_f({a}, {a})",
    UnaryOp.SIN: "csin_f({a})",
    UnaryOp.COS: "ccos_f({a})",
    UnaryOp.TAN: "ctan_f({a})",
    UnaryOp.TANH: "ctanh_f({a})",
    UnaryOp.SINH: "csinh_f({a})",
    UnaryOp.COSH: "ccosh_f({a})",
    UnaryOp.IS_NAN: "cis_nan_f({a})",
    UnaryOp.IS_INF: "cis_inf_f({a})",
    UnaryOp.IS_FINITE: "cis_finite_f({a})",
    UnaryOp.LOGICAL_NOT: f"all({{a}} == {ZERO})",
    "real": "({a}).x",
    "imag": "({a}).y",
    "conj": "c64(({a}).x, -({a}).y)",
    "cabs": "cabs_f({a})",
    "angle": "atan2_f(({a}).y, ({a}).x)",
}
#: The unary ops whose result is ``f32``.
REAL_RESULT = frozenset({"real", "imag", "cabs", "angle"})

BINARY: dict[str, str] = {
    BinaryOp.ADD: "({a} + {b})",
    BinaryOp.SUB: "({a} - {b})",
    BinaryOp.MUL: "cmul_f({a}, {b})",
    BinaryOp.DIV: "cdiv_f({a}, {b})",
    BinaryOp.EQ: "all({a} == {b})",
    BinaryOp.NE: "any({a} != {b})",
}
