"""Inclusive scans (cumsum, cumprod, cummax, cummin, logcumsumexp) along one dim.

Many lines: a thread walks each line (``lane``). Few long lines: a workgroup per
line scans 256-element tiles in workgroup memory (Hillis-Steele) and carries each
tile's total into the next (``tile``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor, contiguous_strides
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage
from ember.backend.cube.kernels.reduce import _geometry, _info_head, _tail_at
from ember.backend.ops import CumulativeOp

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

_WG = wgsl.WORKGROUP
_MR = wgsl.MAX_RANK
_OFF = 2 + _MR
_COMBINE = {
    CumulativeOp.CUMSUM: {"f32": "({a} + {b})", "i32": "({a} + {b})", "i64": "add_l({a}, {b})"},
    CumulativeOp.CUMPROD: {"f32": "({a} * {b})", "i32": "({a} * {b})", "i64": "mul_l({a}, {b})"},
    CumulativeOp.CUMMAX: {"f32": "max_f({a}, {b})", "i32": "max({a}, {b})", "i64": "max_l({a}, {b})"},
    CumulativeOp.CUMMIN: {"f32": "min_f({a}, {b})", "i32": "min({a}, {b})", "i64": "min_l({a}, {b})"},
    CumulativeOp.LOGCUMSUMEXP: {"f32": "logaddexp_f({a}, {b})"},
}
_IDENTITY = {
    CumulativeOp.CUMSUM: {"f32": "0.0", "i32": "0", "i64": wgsl.ZERO["i64"]},
    CumulativeOp.CUMPROD: {"f32": "1.0", "i32": "1", "i64": "i64(1u, 0u)"},
    CumulativeOp.CUMMAX: {"f32": "-inf_f()", **wgsl.INT_MIN},
    CumulativeOp.CUMMIN: {"f32": "inf_f()", **wgsl.INT_MAX},
    CumulativeOp.LOGCUMSUMEXP: {"f32": "-inf_f()"},
}


def _source(op: CumulativeOp, mode: str, st: Storage) -> KernelSource:
    ct = st.compute
    combine, identity = _COMBINE[op][ct], _IDENTITY[op][ct]
    p = _tail_at(2)
    head = [
        f"    let n = info[{p}u];",
        f"    let rs = bitcast<i32>(info[{p + 1}u]);",
        f"    let ws = bitcast<i32>(info[{p + 2}u]);",
    ]
    value = wgsl.load(st, "in0", "u32(o0 + i32(r) * rs)")
    if mode == "lane":
        body = "\n".join(
            [
                "    if (gi >= info[0]) { return; }",
                wgsl.strided_offsets("gi", "info[1]", 2, [("o0", _OFF), ("o1", _OFF + 1 + _MR)]),
                *head,
                f"    var acc: {ct} = {identity};",
                "    for (var r = 0u; r < n; r++) {",
                f"        acc = {combine.format(a='acc', b=value)};",
                f"        out0[u32(o1 + i32(r) * ws)] = {wgsl.store(st, 'acc')};",
                "    }",
            ]
        )
        code = wgsl.main_linear(body)
    else:
        body = "\n".join(
            [
                "    if (wid >= info[0]) { return; }",
                wgsl.strided_offsets("wid", "info[1]", 2, [("o0", _OFF), ("o1", _OFF + 1 + _MR)]),
                *head,
                f"    var carry: {ct} = {identity};",
                f"    for (var t = 0u; t < n; t += {_WG}u) {{",
                "        let r = t + lid;",
                f"        var v: {ct} = {identity};",
                f"        if (r < n) {{ v = {value}; }}",
                "        sh[lid] = v;",
                "        workgroupBarrier();",
                f"        for (var s = 1u; s < {_WG}u; s = s << 1u) {{",
                f"            var w: {ct} = sh[lid];",
                f"            if (lid >= s) {{ w = {combine.format(a='sh[lid - s]', b='w')}; }}",
                "            workgroupBarrier();",
                "            sh[lid] = w;",
                "            workgroupBarrier();",
                "        }",
                f"        let total = {combine.format(a='carry', b='sh[lid]')};",
                f"        if (r < n) {{ out0[u32(o1 + i32(r) * ws)] = {wgsl.store(st, 'total')}; }}",
                f"        carry = {combine.format(a='carry', b=f'sh[{_WG - 1}u]')};",
                "        workgroupBarrier();",
                "    }",
            ]
        )
        code = f"var<workgroup> sh: array<{ct}, {_WG}>;\n" + wgsl.main_groups(body)
    source = "\n".join([wgsl.bindings([st], [st]), wgsl.helpers_for(code + st.store), code])
    return KernelSource(f"{op}_{mode}", source, 1, 1)


def cumulative(backend: KernelContext, op: CumulativeOp, x: CubeTensor, dim: int) -> CubeTensor:
    out = backend.empty(x.shape, x.storage)
    n = x.shape[dim]
    if x.size == 0:
        return out
    out_strides = contiguous_strides(x.shape)
    cshape, (strides, ostrides) = _geometry(x, dim, [out_strides])
    lines = x.size // n
    mode = "tile" if lines < 256 and n > 64 else "lane"
    kernel = backend.cache.get(("scan", op, mode, x.storage), lambda: _source(op, mode, x.storage))
    info = _info_head(lines, cshape, [(x.offset, strides), (0, ostrides)])
    info += [n, x.strides[dim] & 0xFFFF_FFFF, out_strides[dim]]
    backend.runtime.launch(kernel, [x.buffer, out.buffer], info, -(-lines // _WG) if mode == "lane" else lines)
    return out
