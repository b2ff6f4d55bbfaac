"""Row kernels: one workgroup per row of a reduction or a softmax, for rows that are
contiguous (the reduced dim has stride 1).

Each invocation folds a strided share of the row (``vec4`` loads when the rows are
whole, aligned quads), then the workgroup combines the partial values: with subgroup
operations where the adapter has them (one reduction per subgroup, the subgroups'
results combined in order through workgroup memory: one barrier), else a tree in
workgroup memory. A softmax row short enough to fit the workgroup's registers
(up to ``MAX_CACHE`` quads per invocation) is read from memory once.
"""

from __future__ import annotations

from ember.backend.cube import wgsl
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage
from ember.backend.ops import ReduceOp

#: The most quads of a softmax row each invocation keeps in registers (rows up to
#: ``4 * MAX_CACHE * workgroup`` elements are read from memory once).
MAX_CACHE = 16
#: Storage words WGSL has ``vec4`` of.
_VEC_WORDS = ("f32", "i32", "u32", "f16")


def workgroup_size(n: int, cpu: bool) -> int:
    """Invocations per row: on a GPU, enough for about four quads each, 64 to 256; on a
    CPU adapter, 16.

    lavapipe runs a workgroup as a loop over SIMD vectors of 8 invocations on one core,
    so a wider workgroup only adds loop trips and barrier work: on 4096x1024 sums and
    softmaxes (alternating rounds, medians of 5) 16 invocations ran 1.5-2x faster than
    64 and 4-10x faster than 256, and 8 was within the noise of 16."""
    if cpu:
        return 16
    wg = 64
    while wg < 256 and n > 16 * wg:
        wg *= 2
    return wg


def cache_slots(n: int, wg: int) -> int:
    """Quads of a softmax row per invocation to keep in registers (a power of two, at
    most :data:`MAX_CACHE`; 0: the row is longer, read it again per pass)."""
    quads_per_row = -(-n // 4)
    quads = -(-quads_per_row // wg)
    if quads > MAX_CACHE:
        return 0
    slots = 1
    while slots < quads:
        slots *= 2
    return slots


def vectorisable(storage: Storage) -> bool:
    return storage.wgsl in _VEC_WORDS


def _subgroup_op(op: str, ctype: str, value: str) -> str | None:
    """A subgroup-wide ``op`` of ``value``, or None where WGSL has none that matches
    ember's semantics (64-bit ints; a NaN-propagating max/min is built from two)."""
    if ctype == "i64":
        return None
    if op in (ReduceOp.SUM, ReduceOp.MEAN):
        return f"subgroupAdd({value})"
    if op == ReduceOp.PROD:
        return f"subgroupMul({value})"
    if op in (ReduceOp.MAX, ReduceOp.MIN):
        name = "subgroupMax" if op == ReduceOp.MAX else "subgroupMin"
        if ctype == "f32":  # NaN wins, as in max_f / min_f
            return f"select({name}({value}), nan_f(), subgroupAny(is_nan_f({value})))"
        return f"{name}({value})"
    if op == ReduceOp.ANY:
        return f"subgroupAny({value})"
    if op == ReduceOp.ALL:
        return f"subgroupAll({value})"
    return None


def combine_lines(
    var: str, op: str, combine: str, init: str, ctype: str, wg: int, subgroups: bool, tag: str
) -> tuple[list[str], str]:
    """Statements that combine every invocation's ``var`` into ``{var}_all`` (the same in
    all invocations), and the workgroup-memory declaration they use."""
    sub = _subgroup_op(op, ctype, var) if subgroups else None
    if sub is not None:
        decl = f"var<workgroup> sh_{tag}: array<{ctype}, {wg}>;"
        lines = [
            f"    let {var}_sg = {sub};",
            f"    if (sg_lane == 0u) {{ sh_{tag}[sg_id] = {var}_sg; }}",
            "    workgroupBarrier();",
            f"    var {var}_all: {ctype} = {init};",
            f"    for (var i = 0u; i < n_sg; i++) {{ {var}_all = {combine.format(a=f'{var}_all', b=f'sh_{tag}[i]')}; }}",
        ]
        return lines, decl
    decl = f"var<workgroup> sh_{tag}: array<{ctype}, {wg}>;"
    lines = [
        f"    sh_{tag}[lid] = {var};",
        "    workgroupBarrier();",
        f"    for (var s = {wg // 2}u; s > 0u; s = s >> 1u) {{",
        f"        if (lid < s) {{ sh_{tag}[lid] = {combine.format(a=f'sh_{tag}[lid]', b=f'sh_{tag}[lid + s]')}; }}",
        "        workgroupBarrier();",
        "    }",
        f"    let {var}_all = sh_{tag}[0];",
    ]
    return lines, decl


def main(body: str, wg: int, subgroups: bool) -> str:
    """A ``main`` with ``wid`` (the linear workgroup index), ``lid`` and, with
    subgroups, ``sg_id``, ``n_sg`` and ``sg_lane``."""
    extra = (
        (
            ",\n        @builtin(subgroup_id) sg_id: u32, @builtin(num_subgroups) n_sg: u32,"
            " @builtin(subgroup_invocation_id) sg_lane: u32"
        )
        if subgroups
        else ""
    )
    return (
        f"@compute @workgroup_size({wg})\n"
        "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
        f"        @builtin(local_invocation_index) lid: u32{extra}) {{\n"
        "    let wid = wg.x + wg.y * nwg.x;\n"
        f"{body}\n}}\n"
    )


def fold_lines(acc: str, combine: str, src: Storage, vec: bool, wg: int) -> list[str]:
    """A loop folding this invocation's share of the row at ``o0`` (``n`` long) into ``acc``."""
    if vec:
        step = acc
        for x in "xyzw":
            step = combine.format(a=step, b=src.load.format(x=f"q.{x}"))
        return [
            f"    for (var i = lid; i < n / 4u; i += {wg}u) {{",
            "        let q = in0[(u32(o0) >> 2u) + i];",
            f"        {acc} = {step};",
            "    }",
        ]
    value = wgsl.load(src, "in0", "u32(o0) + r")
    return [f"    for (var r = lid; r < n; r += {wg}u) {{ {acc} = {combine.format(a=acc, b=value)}; }}"]


def bindings(src: Storage, dst: Storage, vec: bool) -> str:
    return wgsl.bindings([f"vec4<{src.wgsl}>" if vec else src], [dst])


def reduce_source(
    op: str,
    src: Storage,
    dst: Storage,
    ctype: str,
    combine: str,
    init: str,
    final: str,
    head: list[str],
    offsets: str,
    wg: int,
    vec: bool,
    subgroups: bool,
) -> KernelSource:
    """One workgroup per output: ``final`` (of ``acc``) stored at ``out0[wid]``."""
    fold = fold_lines("acc", combine, src, vec, wg)
    lines, decl = combine_lines("acc", op, combine, init, ctype, wg, subgroups, "r")
    body = "\n".join(
        [
            "    if (wid >= info[0]) { return; }",
            offsets,
            *head,
            f"    var acc: {ctype} = {init};",
            *fold,
            *lines,
            "    if (lid == 0u) {",
            "        let acc = acc_all;",
            f"        out0[wid] = {wgsl.store(dst, wgsl.convert(final, ctype, dst.compute))};",
            "    }",
        ]
    )
    code = "\n".join([decl, main(body, wg, subgroups)])
    source = "\n".join([bindings(src, dst, vec), wgsl.helpers_for(code + dst.store + src.load), code])
    return KernelSource(f"reduce_{op}_row{wg}{'_v' if vec else ''}{'_sg' if subgroups else ''}", source, 1, 1)


def softmax_source(
    log: bool, src: Storage, head: list[str], offsets: str, wg: int, vec: bool, subgroups: bool, cache: int
) -> KernelSource:
    """One workgroup per row: max, sum of exponentials, then the row written at ``o1``.
    With ``vec`` the row's quads live in ``cache`` registers per invocation between the
    passes when they fit (``n <= 4 * cache * wg``), else they are read again."""
    result = "({v} - m - log(total))" if log else "(exp({v} - m) / total)"
    max_lines, max_decl = combine_lines("mx", ReduceOp.MAX, "max_f({a}, {b})", "-inf_f()", "f32", wg, subgroups, "m")
    sum_lines, sum_decl = combine_lines("sm", ReduceOp.SUM, "({a} + {b})", "0.0", "f32", wg, subgroups, "s")
    lines = ["    if (wid >= info[0]) { return; }", offsets, *head]
    if vec:
        load = [src.load.format(x=f"q.{x}") for x in "xyzw"]
        lines += [
            "    let nq = n / 4u;",
            f"    let cached = nq <= {cache * wg}u;",
            "    var mx = -inf_f();",
            f"    var c: array<vec4<f32>, {max(cache, 1)}>;",
            "    if (cached) {",
        ]
        for j in range(cache):
            lines += [
                f"        let i{j} = lid + {j * wg}u;",
                f"        if (i{j} < nq) {{",
                f"            let q = in0[(u32(o0) >> 2u) + i{j}];",
                f"            c[{j}] = vec4<f32>({', '.join(load)});",
                f"            mx = max_f(max_f(max_f(max_f(mx, c[{j}].x), c[{j}].y), c[{j}].z), c[{j}].w);",
                "        }",
            ]
        lines += [
            "    } else {",
            f"        for (var i = lid; i < nq; i += {wg}u) {{",
            "            let q = in0[(u32(o0) >> 2u) + i];",
            "            mx = " + "max_f(" * 4 + "mx, " + "), ".join(load) + ");",
            "        }",
            "    }",
            *max_lines,
            "    let m = mx_all;",
            "    var sm = 0.0;",
            "    if (cached) {",
        ]
        for j in range(cache):
            lines.append(
                f"        if (lid + {j * wg}u < nq) {{ let e = exp(c[{j}] - vec4<f32>(m)); sm += e.x + e.y + e.z + e.w; }}"
            )
        lines += [
            "    } else {",
            f"        for (var i = lid; i < nq; i += {wg}u) {{",
            "            let q = in0[(u32(o0) >> 2u) + i];",
            f"            let e = exp(vec4<f32>({', '.join(load)}) - vec4<f32>(m));",
            "            sm += e.x + e.y + e.z + e.w;",
            "        }",
            "    }",
            *sum_lines,
            "    let total = sm_all;",
        ]
        # Each lane's result as a stored word; the four stored as one vec4.
        words = ", ".join(wgsl.store(src, result.format(v=f"q.{x}")) for x in "xyzw")
        write = f"out0[(u32(o1) >> 2u) + i] = vec4<{src.wgsl}>({words});"
        lines.append("    if (cached) {")
        for j in range(cache):
            lines.append(f"        {{ let i = lid + {j * wg}u; if (i < nq) {{ let q = c[{j}]; {write} }} }}")
        lines += [
            "    } else {",
            f"        for (var i = lid; i < nq; i += {wg}u) {{",
            "            let w = in0[(u32(o0) >> 2u) + i];",
            f"            let q = vec4<f32>({', '.join(x.replace('q.', 'w.') for x in load)});",
            f"            {write}",
            "        }",
            "    }",
        ]
    else:
        value = wgsl.load(src, "in0", "u32(o0) + r")
        lines += [
            "    var mx = -inf_f();",
            f"    for (var r = lid; r < n; r += {wg}u) {{ mx = max_f(mx, {value}); }}",
            *max_lines,
            "    let m = mx_all;",
            "    var sm = 0.0;",
            f"    for (var r = lid; r < n; r += {wg}u) {{ sm += exp({value} - m); }}",
            *sum_lines,
            "    let total = sm_all;",
            f"    for (var r = lid; r < n; r += {wg}u) {{ let v = {value}; out0[u32(o1) + r] = {wgsl.store(src, result.format(v='v'))}; }}",
        ]
    code = "\n".join([max_decl, sum_decl, main("\n".join(lines), wg, subgroups)])
    out = f"vec4<{src.wgsl}>" if vec else src
    source = "\n".join(
        [wgsl.bindings([out if vec else src], [out]), wgsl.helpers_for(code + src.store + src.load), code]
    )
    name = f"{'log_' if log else ''}softmax_row{wg}{f'_v{cache}' if vec else ''}{'_sg' if subgroups else ''}"
    return KernelSource(name, source, 1, 1)
