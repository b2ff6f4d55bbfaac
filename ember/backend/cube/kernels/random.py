"""Counter-based random numbers: Philox4x32-10 in a WGSL kernel.

Thread ``t`` of a draw encrypts the counter ``counter + t`` under the draw's key and
turns the four words into four values by the mapping :mod:`ember.backend.philox`
defines (and implements in numpy for flex): the same bits on every backend. Every
product that feeds an addition passes through ``keep``, an exclusive-or with a zero
word the compiler cannot see, so no shader compiler may fuse the two into one
multiply-add (which rounds once instead of twice).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ember.backend import philox
from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage
from ember.backend.distribution import Distribution

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

ZERO_AT = 9  # info word holding 0, for keep()


def _f(bits: int) -> str:
    return f"bitcast<f32>({bits:#010x}u)"


def _horner(x: str, coeffs: tuple[int, ...]) -> str:
    expr = _f(coeffs[-1])
    for c in coeffs[-2::-1]:
        expr = f"keep(({expr}) * {x}) + {_f(c)}"
    return expr


PHILOX_WGSL = f"""
fn mulhilo(a: u32, b: u32) -> vec2<u32> {{
    let al = a & 0xffffu; let ah = a >> 16u;
    let bl = b & 0xffffu; let bh = b >> 16u;
    let ll = al * bl; let hl = ah * bl; let lh = al * bh; let hh = ah * bh;
    let cross = (ll >> 16u) + (hl & 0xffffu) + lh;
    return vec2<u32>(hh + (hl >> 16u) + (cross >> 16u), a * b);
}}

fn philox(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {{
    var c = counter;
    var k = key;
    for (var r = 0u; r < {philox.ROUNDS}u; r++) {{
        let p0 = mulhilo({philox.M0}u, c.x);
        let p1 = mulhilo({philox.M1}u, c.z);
        c = vec4<u32>(p1.x ^ c.y ^ k.x, p1.y, p0.x ^ c.w ^ k.y, p0.y);
        k = k + vec2<u32>({philox.W0}u, {philox.W1}u);
    }}
    return c;
}}

fn keep(x: f32) -> f32 {{
    return bitcast<f32>(bitcast<u32>(x) ^ info[{ZERO_AT}u]);
}}

fn ln_unit(u: f32) -> f32 {{
    let bits = bitcast<u32>(u);
    var e = i32(bits >> 23u) - 127;
    var m = (bits & 0x7fffffu) | 0x3f800000u;
    if ((bits & 0x7fffffu) > {philox.SQRT2_BITS & 0x7FFFFF:#x}u) {{
        e += 1;
        m -= 0x00800000u;
    }}
    let t = bitcast<f32>(m) - 1.0;
    let p = {_horner("t", philox.LOG_COEFFS)};
    return keep(p * t) + keep(f32(e) * {_f(philox.LN2)});
}}

fn sqrt_pos(x: f32) -> f32 {{
    var y = bitcast<f32>({philox.RSQRT_MAGIC:#x}u - (bitcast<u32>(x) >> 1u));
    let h = x * 0.5;
    for (var i = 0u; i < 3u; i++) {{
        y = y * (1.5 - keep((h * y) * y));
    }}
    return x * y;
}}

fn box_muller(a: u32, b: u32) -> vec2<f32> {{
    let u1 = f32(((a >> 9u) << 1u) | 1u) * {_f(0x33800000)};
    let r = sqrt_pos(ln_unit(u1) * -2.0);
    let t = b >> 8u;
    let q = t >> 22u;
    let flip = (t & 0x3fffffu) > 0x200000u;
    let turn = select(t & 0x3fffffu, 0x400000u - (t & 0x3fffffu), flip);
    let theta = f32(turn) * {_f(philox.ANGLE_STEP)};
    let z = theta * theta;
    let s = ({_horner("z", philox.SIN_COEFFS)}) * theta;
    let c = {_horner("z", philox.COS_COEFFS)};
    let swap = flip != ((q & 1u) == 1u);
    var cs = select(vec2<f32>(c, s), vec2<f32>(s, c), swap);
    if (q - 1u < 2u) {{ cs.x = -cs.x; }}
    if (q >= 2u) {{ cs.y = -cs.y; }}
    return vec2<f32>(cs.x * r, cs.y * r);
}}
"""

_KINDS = {"uniform": 0, "normal": 1, "bernoulli": 2}


def _source(out: Storage) -> KernelSource:
    body = "\n".join(
        [
            "    let n = info[0];",
            "    if (gi * 4u >= n) { return; }",
            "    let lo = info[1] + gi;",
            "    let hi = info[2] + select(0u, 1u, lo < gi);",
            "    let w = philox(vec4<u32>(lo, hi, 0u, 0u), vec2<u32>(info[3], info[4]));",
            "    let kind = info[5];",
            "    let p0 = bitcast<f32>(info[6]); let p1 = bitcast<f32>(info[7]); let p2 = bitcast<f32>(info[8]);",
            f"    let u = vec4<f32>(w >> vec4<u32>(8u)) * {_f(0x33800000)};",
            "    var v: vec4<f32>;",
            "    if (kind == 0u) {",
            "        for (var j = 0u; j < 4u; j++) { v[j] = min(keep(u[j] * p1) + p0, p2); }",
            "    } else if (kind == 1u) {",
            "        let z = vec4<f32>(box_muller(w.x, w.y), box_muller(w.z, w.w));",
            "        for (var j = 0u; j < 4u; j++) { v[j] = keep(z[j] * p1) + p0; }",
            "    } else {",
            "        v = select(vec4<f32>(0.0), vec4<f32>(1.0), u < vec4<f32>(p0));",
            "    }",
            "    for (var j = 0u; j < 4u; j++) {",
            "        let i = gi * 4u + j;",
            "        if (i < n) {",
            f"            out0[i] = {wgsl.store(out, wgsl.convert('v[j]', 'f32', out.compute))};",
            "        }",
            "    }",
        ]
    )
    code = PHILOX_WGSL + wgsl.main_linear(body)
    source = "\n".join([wgsl.bindings([], [out]), wgsl.helpers_for(code + out.store), code])
    return KernelSource("random_philox", source, 0, 1)


def _params(distribution: Distribution) -> tuple[float, float, float]:
    if distribution.kind == "uniform":
        lo, scale, cap = philox.uniform_params(distribution.a, distribution.b)
        return float(lo), float(scale), float(cap)
    if distribution.kind == "normal":
        return distribution.a, distribution.b, 0.0
    return distribution.a, 0.0, 0.0


def sample(
    backend: KernelContext, shape: tuple[int, ...], distribution: Distribution, storage: Storage, key: int, counter: int
) -> CubeTensor:
    """The draw at ``(key, counter)`` (see :mod:`ember.backend.philox`)."""
    out = backend.empty(shape, storage)
    n = out.size
    if n == 0:
        return out
    blocks = -(-n // 4)
    kernel = backend.cache.get(("random", storage), lambda: _source(storage))
    p0, p1, p2 = (int(np.float32(v).view(np.uint32)) for v in _params(distribution))
    info = [
        n,
        counter & 0xFFFF_FFFF,
        (counter >> 32) & 0xFFFF_FFFF,
        key & 0xFFFF_FFFF,
        (key >> 32) & 0xFFFF_FFFF,
        _KINDS[distribution.kind],
        p0,
        p1,
        p2,
        0,
    ]
    backend.runtime.launch(kernel, [out.buffer], info, -(-blocks // wgsl.WORKGROUP))
    return out
