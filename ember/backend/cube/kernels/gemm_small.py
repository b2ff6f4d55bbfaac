"""The barrier-free register-blocked matmul template, for small M, K or N.

Each invocation computes ``tm x 4`` outputs in ``tm`` named ``vec4`` accumulators,
reading A and B straight from global memory (no workgroup memory, no barriers): it
pays no tile staging, which is most of the work when K is small, and wastes no
threads when M or N is smaller than a shared-memory tile. A workgroup of 64
invocations is ``wx`` column quads by ``64 / wx`` row blocks, ``wx`` fitted to N so
that narrow outputs (N = 10) don't leave most of a workgroup idle.

As in the tiled template, rows and columns past the edge are clamped to the last
valid one, so the K loop has no bounds checks; only the stores check. The K loop steps
by 4 when an operand is read ``vec4`` along K (its K is then a multiple of 4) and is
unrolled at generation time over those steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ember.backend.cube import wgsl
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage
from ember.backend.cube.kernels import gemm_common as gc

WORKGROUP = 64


@dataclass(frozen=True)
class Blocking:
    tm: int  # rows per invocation
    wx: int  # column quads per workgroup (a power of two dividing WORKGROUP)

    @property
    def wy(self) -> int:
        return WORKGROUP // self.wx


class GatherB(Protocol):
    """A B operand computed from another tensor while it is loaded (im2col)."""

    def setup(self) -> list[str]:
        """Statements before the K loop; may use ``c`` (the first column), ``n``, ``base1``."""

    def step(self, s: int) -> tuple[list[str], str]:
        """Statements and the ``vec4`` expression of B's row ``k + s`` at columns
        ``c .. c + 3``; called for ``s = 0, 1, ...`` in order, once per K step."""

    def advance(self, step: int) -> list[str]:
        """Statements at the end of a K step of ``step`` rows."""


def source(
    blk: Blocking,
    a: Storage,
    a_mode: str,
    b: Storage,
    b_mode: str,
    out: Storage,
    out_vec: bool,
    ctype: str,
    epilogue: gc.EpilogueSpec | None,
    gather: GatherB | None = None,
) -> KernelSource:
    """The kernel's source; with ``gather`` (``b_mode == "g"``) B is computed by it."""
    extra = epilogue.storages if epilogue is not None else ()
    n_ops = 2 + len(extra)
    step = 4 if "k" in (a_mode, b_mode) else 1
    pa, pb = gc.block_at(0), gc.block_at(1)
    lines = [
        "    let m = info[0]; let n = info[1]; let kdim = info[2];",
        "    if (wg.z >= info[3]) { return; }",
        "    let batch = wg.z + info[4];",
        f"    let cq = (wg.x + info[5]) * {blk.wx}u + lid % {blk.wx}u;",
        f"    let rb = (wg.y + info[6]) * {blk.wy}u + lid / {blk.wx}u;",
        f"    let r0 = rb * {blk.tm}u; let c = cq * 4u;",
        "    if (r0 >= m || c >= n) { return; }",
        *gc.batch_offsets(n_ops),
    ]
    lines += [f"    eo{j} = base{2 + j};" for j in range(len(extra))]
    lines.append(f"    let a_rs = bitcast<i32>(info[{pa + 1}u]); let a_ks = bitcast<i32>(info[{pa + 2}u]);")
    lines.append(f"    let b_ks = bitcast<i32>(info[{pb + 1}u]); let b_cs = bitcast<i32>(info[{pb + 2}u]);")
    # Row / column addresses, clamped to the last valid row / column.
    if a_mode == "o":
        for q in range(blk.tm // 4):
            lines.append(f"    let a_at{q} = base0 + i32(min(r0 + {4 * q}u, m - 4u));")
    else:
        for i in range(blk.tm):
            lines.append(f"    let a_at{i} = base0 + i32(min(r0 + {i}u, m - 1u)) * a_rs;")
    if gather is not None:
        lines += gather.setup()
    elif b_mode == "o":
        lines.append("    let b_at = base1 + i32(c);")  # n % 4 == 0: the quad is whole
    else:
        for j in range(4):
            lines.append(f"    let b_at{j} = base1 + i32(min(c + {j}u, n - 1u)) * b_cs;")
    lines += [f"    var acc{i} = {gc.zero_vec(ctype)};" for i in range(blk.tm)]
    lines.append(f"    for (var k = 0u; k < kdim; k += {step}u) {{")
    # A: a{i}_{s} is row i at k + s, as a scalar expression.
    a_val: dict[tuple[int, int], str] = {}
    if a_mode == "k":
        for i in range(blk.tm):
            lines.append(f"        let av{i} = in0[(u32(a_at{i}) + k) >> 2u];")
            for s in range(step):
                a_val[i, s] = f"av{i}.{'xyzw'[s]}"
    elif a_mode == "o":
        for s in range(step):
            for q in range(blk.tm // 4):
                lines.append(f"        let av{q}_{s} = in0[u32(a_at{q} + i32(k + {s}u) * a_ks) >> 2u];")
                for i in range(4):
                    a_val[4 * q + i, s] = f"av{q}_{s}.{'xyzw'[i]}"
    else:
        for s in range(step):
            for i in range(blk.tm):
                lines.append(f"        let av{i}_{s} = {wgsl.load(a, 'in0', f'u32(a_at{i} + i32(k + {s}u) * a_ks)')};")
                a_val[i, s] = f"av{i}_{s}"
    # B: bv{s} is the column quad at k + s.
    if gather is not None:
        for s in range(step):
            step_lines, value = gather.step(s)
            lines += step_lines
            lines.append(f"        let bv{s} = {value};")
    elif b_mode == "k":
        for j in range(4):
            lines.append(f"        let bc{j} = in1[(u32(b_at{j}) + k) >> 2u];")
        for s in range(step):
            x = "xyzw"[s]
            lines.append(f"        let bv{s} = vec4<{ctype}>(bc0.{x}, bc1.{x}, bc2.{x}, bc3.{x});")
    elif b_mode == "o":
        for s in range(step):
            lines.append(f"        let bv{s} = in1[u32(b_at + i32(k + {s}u) * b_ks) >> 2u];")
    else:
        for s in range(step):
            parts = ", ".join(wgsl.load(b, "in1", f"u32(b_at{j} + i32(k + {s}u) * b_ks)") for j in range(4))
            lines.append(f"        let bv{s} = vec4<{ctype}>({parts});")
    for s in range(step):
        for i in range(blk.tm):
            lines.append(f"        acc{i} = {gc.madd(ctype, f'vec4<{ctype}>({a_val[i, s]})', f'bv{s}', f'acc{i}')};")
    if gather is not None:
        lines += gather.advance(step)
    lines.append("    }")
    rows = [(f"(r0 + {i}u)", f"acc{i}") for i in range(blk.tm)]
    lines += gc.store_lines(ctype, rows, "c", out_vec)
    body = "\n".join(lines)
    main = (
        f"@compute @workgroup_size({WORKGROUP})\n"
        "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
        f"{body}\n}}\n"
    )
    epi = gc.epilogue_function(epilogue, ctype, out)
    ins, outs = gc.binding_types(a, a_mode, b, b_mode, extra, out, out_vec, epilogue)
    code = "\n".join([epi, main])
    more = epilogue.output_types() if epilogue is not None else []
    helpers = wgsl.helpers_for(code + "".join(s.store for s in (a, b, out, *extra, *more)))
    name = f"matmul_regs_{blk.tm}x4_w{blk.wx}_{a_mode}{b_mode}{'v' if out_vec else 's'}"
    return KernelSource(name, "\n".join([wgsl.bindings(ins, outs), helpers, code]), len(ins), len(outs))
