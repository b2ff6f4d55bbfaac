"""64-bit integers on two 32-bit words: the WGSL helpers behind cube's ``int64``.

WGSL has no 64-bit integers, so an int64 lives in a ``vec2<u32>`` (``x`` the low
word, ``y`` the high word, two's complement; the same bytes as a little-endian
int64, so uploads and read-backs need no conversion). Kernels name that type
``i64`` (a WGSL ``alias``, see :data:`ALIAS`) and compute with the helpers below,
which wrap modulo 2**64 exactly as numpy and PyTorch do. Division and remainder
follow Python's floor rule; shifts by 64 or more (or negative amounts) give 0 to
the left and the sign to the right, as numpy; float to int64 truncates, with NaN
and values outside the range giving -2**63 (numpy on x86); int64 to float32 rounds
to nearest even.

Helper names end in ``_l`` so that :func:`ember.backend.cube.wgsl.helpers_for`
finds them.
"""

from __future__ import annotations

ALIAS = "alias i64 = vec2<u32>;"

ZERO = "i64(0u, 0u)"
ONE = "i64(1u, 0u)"
MIN = "i64(0u, 0x80000000u)"
MAX = "i64(0xffffffffu, 0x7fffffffu)"

HELPERS: dict[str, str] = {
    "is_neg_l": "fn is_neg_l(a: i64) -> bool { return (a.y & 0x80000000u) != 0u; }",
    "is_zero_l": "fn is_zero_l(a: i64) -> bool { return (a.x | a.y) == 0u; }",
    "i32_to_l": "fn i32_to_l(x: i32) -> i64 { return i64(bitcast<u32>(x), select(0u, 0xffffffffu, x < 0)); }",
    "add_l": """fn add_l(a: i64, b: i64) -> i64 {
    let lo = a.x + b.x;
    return i64(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}""",
    "sub_l": """fn sub_l(a: i64, b: i64) -> i64 {
    return i64(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}""",
    "neg_l": "fn neg_l(a: i64) -> i64 { return sub_l(i64(0u, 0u), a); }",
    "mulwide_l": """fn mulwide_l(a: u32, b: u32) -> i64 {
    // The full 64-bit product of two u32, from 16-bit halves.
    let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;
    let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0; let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return i64((p00 & 0xffffu) | (mid << 16u), p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}""",
    "mul_l": """fn mul_l(a: i64, b: i64) -> i64 {
    let p = mulwide_l(a.x, b.x);
    return i64(p.x, p.y + a.x * b.y + a.y * b.x);
}""",
    "eq_l": "fn eq_l(a: i64, b: i64) -> bool { return a.x == b.x && a.y == b.y; }",
    "lt_l": """fn lt_l(a: i64, b: i64) -> bool {
    if (a.y != b.y) { return bitcast<i32>(a.y) < bitcast<i32>(b.y); }
    return a.x < b.x;
}""",
    "ult_l": """fn ult_l(a: i64, b: i64) -> bool {
    if (a.y != b.y) { return a.y < b.y; }
    return a.x < b.x;
}""",
    "max_l": "fn max_l(a: i64, b: i64) -> i64 { return select(a, b, lt_l(a, b)); }",
    "min_l": "fn min_l(a: i64, b: i64) -> i64 { return select(a, b, lt_l(b, a)); }",
    "abs_l": "fn abs_l(a: i64) -> i64 { return select(a, neg_l(a), is_neg_l(a)); }",
    "sign_l": """fn sign_l(a: i64) -> i64 {
    if (is_neg_l(a)) { return i64(0xffffffffu, 0xffffffffu); }
    return i64(select(0u, 1u, !is_zero_l(a)), 0u);
}""",
    "shl_l": """fn shl_l(a: i64, s: u32) -> i64 {
    // s < 64 (WGSL takes shift amounts modulo 32, so each case is spelled out).
    if (s == 0u) { return a; }
    if (s >= 32u) { return i64(0u, a.x << (s - 32u)); }
    return i64(a.x << s, (a.y << s) | (a.x >> (32u - s)));
}""",
    "shr_u_l": """fn shr_u_l(a: i64, s: u32) -> i64 {
    // Logical shift right, s < 64.
    if (s == 0u) { return a; }
    if (s >= 32u) { return i64(a.y >> (s - 32u), 0u); }
    return i64((a.x >> s) | (a.y << (32u - s)), a.y >> s);
}""",
    "shr_l": """fn shr_l(a: i64, s: u32) -> i64 {
    // Arithmetic shift right, s < 64.
    if (s == 0u) { return a; }
    let hi = bitcast<i32>(a.y);
    if (s >= 32u) { return i64(bitcast<u32>(hi >> (s - 32u)), bitcast<u32>(hi >> 31u)); }
    return i64((a.x >> s) | (a.y << (32u - s)), bitcast<u32>(hi >> s));
}""",
    "shl_by_l": """fn shl_by_l(a: i64, b: i64) -> i64 {
    if (b.y != 0u || b.x >= 64u) { return i64(0u, 0u); }
    return shl_l(a, b.x);
}""",
    "shr_by_l": """fn shr_by_l(a: i64, b: i64) -> i64 {
    if (b.y != 0u || b.x >= 64u) { return shr_l(a, 63u); }
    return shr_l(a, b.x);
}""",
    "udivmod_l": """fn udivmod_l(n: i64, d: i64) -> array<i64, 2> {
    // Unsigned quotient and remainder (d <= 2**63, so 2 r + 1 never overflows).
    if (n.y == 0u && d.y == 0u) { return array<i64, 2>(i64(n.x / d.x, 0u), i64(n.x % d.x, 0u)); }
    var q = i64(0u, 0u);
    var r = i64(0u, 0u);
    for (var i = 63u; i < 64u; i--) {
        r = shl_l(r, 1u);
        if (i >= 32u) { r.x = r.x | ((n.y >> (i - 32u)) & 1u); } else { r.x = r.x | ((n.x >> i) & 1u); }
        if (!ult_l(r, d)) {
            r = sub_l(r, d);
            if (i >= 32u) { q.y = q.y | (1u << (i - 32u)); } else { q.x = q.x | (1u << i); }
        }
    }
    return array<i64, 2>(q, r);
}""",
    "floordiv_l": """fn floordiv_l(a: i64, b: i64) -> i64 {
    if (is_zero_l(b)) { return i64(0u, 0u); }
    let qr = udivmod_l(abs_l(a), abs_l(b));
    if (is_neg_l(a) == is_neg_l(b)) { return qr[0]; }
    let q = neg_l(qr[0]);
    return select(q, sub_l(q, i64(1u, 0u)), !is_zero_l(qr[1]));
}""",
    "rem_l": """fn rem_l(a: i64, b: i64) -> i64 {
    // Python's rule: the remainder takes the sign of the divisor.
    if (is_zero_l(b)) { return i64(0u, 0u); }
    let ub = abs_l(b);
    let qr = udivmod_l(abs_l(a), ub);
    let r0 = qr[1];
    if (is_zero_l(r0)) { return r0; }
    let r = select(r0, sub_l(ub, r0), is_neg_l(a) != is_neg_l(b));
    return select(r, neg_l(r), is_neg_l(b));
}""",
    "pow_l": """fn pow_l(a: i64, b: i64) -> i64 {
    if (is_neg_l(b)) {
        if (eq_l(a, i64(1u, 0u))) { return a; }
        if (eq_l(a, i64(0xffffffffu, 0xffffffffu))) { return select(a, i64(1u, 0u), (b.x & 1u) == 0u); }
        return i64(0u, 0u);
    }
    var base = a;
    var e = b;
    var r = i64(1u, 0u);
    loop {
        if ((e.x & 1u) == 1u) { r = mul_l(r, base); }
        e = shr_u_l(e, 1u);
        if (is_zero_l(e)) { break; }
        base = mul_l(base, base);
    }
    return r;
}""",
    "l_to_f": """fn l_to_f(a: i64) -> f32 {
    // Rounded to nearest even by hand (WGSL leaves the rounding of int to float open).
    let neg = is_neg_l(a);
    let u = select(a, neg_l(a), neg);
    var r: f32;
    if (u.y == 0u && u.x < 16777216u) {
        r = f32(u.x);
    } else {
        let top = select(31u - countLeadingZeros(u.x), 63u - countLeadingZeros(u.y), u.y != 0u);
        let shift = top - 23u;
        var m = shr_u_l(u, shift).x;
        let rest = sub_l(u, shl_l(i64(m, 0u), shift));
        let half = shl_l(i64(1u, 0u), shift - 1u);
        if (ult_l(half, rest) || (eq_l(rest, half) && (m & 1u) == 1u)) { m = m + 1u; }
        r = ldexp(f32(m), i32(shift));
    }
    return select(r, -r, neg);
}""",
    "f_to_l": """fn f_to_l(v: f32) -> i64 {
    // Truncation toward zero; NaN and values outside the range give -2**63.
    let t = trunc(v);
    if (is_nan_f(v) || !(abs(t) < 9223372036854775808.0)) { return i64(0u, 0x80000000u); }
    if (abs(t) < 2147483648.0) { return i32_to_l(i32(t)); }
    let a = abs(t);
    let hi = floor(a / 4294967296.0);
    let u = i64(u32(a - hi * 4294967296.0), u32(hi));
    return select(u, neg_l(u), t < 0.0);
}""",
}


def convert(expr: str, src: str, dst: str) -> str:
    """``expr`` converted between ``i64`` and ``f32``/``i32``/``bool``."""
    if src == "i64":
        return {"f32": f"l_to_f({expr})", "i32": f"bitcast<i32>(({expr}).x)", "bool": f"(!is_zero_l({expr}))"}[dst]
    return {"f32": f"f_to_l({expr})", "i32": f"i32_to_l({expr})", "bool": f"select({ZERO}, {ONE}, {expr})"}[src]
