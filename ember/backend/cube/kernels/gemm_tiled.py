"""The shared-memory tiled matmul template.

A workgroup computes a ``bm x bn`` tile of the output from ``bk``-deep slices of A and B
staged in workgroup memory as ``vec4`` tiles: A transposed (``sa[k][m / 4]``) and B as
is (``sb[k][n / 4]``), so that the inner loop reads whole ``vec4``s. Each invocation
keeps ``tm x 4`` outputs in ``tm`` named ``vec4`` accumulators, updated with ``fma`` in
a K loop unrolled at generation time.

Bounds are handled per tile, not per load: rows and columns past the edge are clamped
to the last valid one when their addresses are computed (once, before the K loop), so
the loads of every slice need no check and edge tiles compute a few wasted outputs that
are never stored; only the last K slice of a K that is not a multiple of ``bk`` takes
a checked copy of the load code (a uniform branch).
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.backend.cube import wgsl
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage
from ember.backend.cube.kernels import gemm_common as gc


@dataclass(frozen=True)
class Tiling:
    bm: int
    bn: int
    bk: int
    tm: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // 4)


def _operand_loads(
    j: int, name: str, mode: str, st: Storage, tile_o: int, bk: int, threads: int, ctype: str, odim: str
) -> tuple[list[str], list[str], list[str]]:
    """(setup before the K loop, loads of a full slice, loads of the last partial slice)
    of operand ``j`` (0: A, outer dim M; 1: B, outer dim N) into ``s{name}``."""
    pos = gc.block_at(j)
    os_, ks = (pos + 1, pos + 2) if j == 0 else (pos + 2, pos + 1)
    origin = "row0" if j == 0 else "col0"
    qo = tile_o // 4
    setup = [f"    let {name}_os = bitcast<i32>(info[{os_}u]); let {name}_ks = bitcast<i32>(info[{ks}u]);"]
    full: list[str] = []
    tail: list[str] = []
    arr = f"in{j}"
    zero = wgsl.ZERO[ctype]
    if mode == "k":  # vec4 along K: quad (oo, kq) -> 4 scalars of s[k][oo / 4]
        total = tile_o * bk // 4
        for slot in range(-(-total // threads)):
            q = f"(lid + {slot * threads}u)"
            guard = total % threads != 0 and slot == total // threads
            setup.append(f"    let {name}_kq{slot} = {q} % {bk // 4}u; let {name}_oo{slot} = {q} / {bk // 4}u;")
            setup.append(
                f"    let {name}_at{slot} = base{j} + i32(min({origin} + {name}_oo{slot}, {odim} - 1u)) * {name}_os;"
            )
            for lines, checked in ((full, False), (tail, True)):
                k = f"k0 + {name}_kq{slot} * 4u"
                load = f"{arr}[(u32({name}_at{slot}) + {k}) >> 2u]"
                body = []
                if checked:
                    body.append(f"var v = vec4<{ctype}>({zero}); if ({k} < kdim) {{ v = {load}; }}")
                else:
                    body.append(f"let v = {load};")
                for c, x in enumerate("xyzw"):
                    body.append(
                        f"s{name}[({name}_kq{slot} * 4u + {c}u) * {qo}u + {name}_oo{slot} / 4u][{name}_oo{slot} % 4u] = v.{x};"
                    )
                text = " ".join(body)
                lines.append(f"        if ({q} < {total}u) {{ {text} }}" if guard else f"        {{ {text} }}")
        return setup, full, tail
    total = bk * qo  # quads along the outer dim: (kk, oq) -> s[kk][oq]
    for slot in range(-(-total // threads)):
        q = f"(lid + {slot * threads}u)"
        guard = total % threads != 0 and slot == total // threads
        setup.append(f"    let {name}_kk{slot} = {q} / {qo}u; let {name}_oq{slot} = {q} % {qo}u;")
        if mode == "o":
            setup.append(f"    let {name}_at{slot} = base{j} + i32(min({origin} + {name}_oq{slot} * 4u, {odim} - 4u));")
        else:
            for c in range(4):
                setup.append(
                    f"    let {name}_at{slot}_{c} = base{j} + i32(min({origin} + {name}_oq{slot} * 4u + {c}u, {odim} - 1u)) * {name}_os;"
                )
        k = f"k0 + {name}_kk{slot}"
        if mode == "o":
            value = f"{arr}[u32({name}_at{slot} + i32({k}) * {name}_ks) >> 2u]"
        else:
            parts = ", ".join(wgsl.load(st, arr, f"u32({name}_at{slot}_{c} + i32({k}) * {name}_ks)") for c in range(4))
            value = f"vec4<{ctype}>({parts})"
        target = f"s{name}[{name}_kk{slot} * {qo}u + {name}_oq{slot}]"
        for lines, checked in ((full, False), (tail, True)):
            if checked:
                text = f"var v = vec4<{ctype}>({zero}); if ({k} < kdim) {{ v = {value}; }} {target} = v;"
            else:
                text = f"{target} = {value};"
            lines.append(f"        if ({q} < {total}u) {{ {text} }}" if guard else f"        {{ {text} }}")
    return setup, full, tail


def source(
    t: Tiling,
    a: Storage,
    a_mode: str,
    b: Storage,
    b_mode: str,
    out: Storage,
    out_vec: bool,
    ctype: str,
    epilogue: gc.EpilogueSpec | None,
) -> KernelSource:
    extra = epilogue.storages if epilogue is not None else ()
    n_ops = 2 + len(extra)
    qm, qn = t.bm // 4, t.bn // 4
    tx_count = t.bn // 4
    lines = [
        "    let m = info[0]; let n = info[1]; let kdim = info[2];",
        "    if (wg.z >= info[3]) { return; }",
        "    let batch = wg.z + info[4];",
        f"    let col0 = (wg.x + info[5]) * {t.bn}u; let row0 = (wg.y + info[6]) * {t.bm}u;",
        f"    let tx = lid % {tx_count}u; let ty = lid / {tx_count}u;",
        *gc.batch_offsets(n_ops),
    ]
    lines += [f"    eo{j} = base{2 + j};" for j in range(len(extra))]
    a_setup, a_full, a_tail = _operand_loads(0, "a", a_mode, a, t.bm, t.bk, t.threads, ctype, "m")
    b_setup, b_full, b_tail = _operand_loads(1, "b", b_mode, b, t.bn, t.bk, t.threads, ctype, "n")
    lines += a_setup + b_setup
    lines += [f"    var acc{i} = {gc.zero_vec(ctype)};" for i in range(t.tm)]
    lines.append(f"    for (var k0 = 0u; k0 < kdim; k0 += {t.bk}u) {{")
    lines.append(f"        if (k0 + {t.bk}u <= kdim) {{")
    lines += ["    " + x for x in a_full + b_full]
    lines.append("        } else {")
    lines += ["    " + x for x in a_tail + b_tail]
    lines.append("        }")
    lines.append("        workgroupBarrier();")
    for kk in range(t.bk):
        for q in range(t.tm // 4):
            lines.append(f"        let a{kk}_{q} = sa[{kk * qm}u + ty * {t.tm // 4}u + {q}u];")
        lines.append(f"        let b{kk} = sb[{kk * qn}u + tx];")
        for i in range(t.tm):
            a_val = f"vec4<{ctype}>(a{kk}_{i // 4}.{'xyzw'[i % 4]})"
            lines.append(f"        acc{i} = {gc.madd(ctype, a_val, f'b{kk}', f'acc{i}')};")
    lines.append("        workgroupBarrier();")
    lines.append("    }")
    lines.append("    let c = col0 + tx * 4u;")
    rows = [(f"(row0 + ty * {t.tm}u + {i}u)", f"acc{i}") for i in range(t.tm)]
    lines += gc.store_lines(ctype, rows, "c", out_vec)
    body = "\n".join(lines)
    main = (
        f"@compute @workgroup_size({t.threads})\n"
        "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
        f"{body}\n}}\n"
    )
    decl = (
        f"var<workgroup> sa: array<vec4<{ctype}>, {t.bk * qm}>;\nvar<workgroup> sb: array<vec4<{ctype}>, {t.bk * qn}>;"
    )
    epi = gc.epilogue_function(epilogue, ctype, out)
    ins, outs = gc.binding_types(a, a_mode, b, b_mode, extra, out, out_vec, epilogue)
    code = "\n".join([decl, epi, main])
    more = epilogue.output_types() if epilogue is not None else []
    helpers = wgsl.helpers_for(code + "".join(s.store for s in (a, b, out, *extra, *more)))
    name = f"matmul_{t.bm}x{t.bn}x{t.bk}_{t.tm}x4_{a_mode}{b_mode}{'v' if out_vec else 's'}"
    return KernelSource(name, "\n".join([wgsl.bindings(ins, outs), helpers, code]), len(ins), len(outs))
