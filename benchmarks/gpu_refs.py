"""Plain hand-written WGSL kernels that ``benchmarks/gpu.py`` measures ember's generated
kernels against: a naive matmul, 4x4 and 8x4 register-tiled matmuls and a vec4 add.

They are written the way a competent person writes a first version: the same tile
geometry a generator would pick, vec4 accumulators, bounds checks on every load, no
generation-time specialisation. Operands are contiguous row-major; batches step by the
strides in the parameter block. Each binds its inputs, then its output, in group 0 and
the parameter block in group 1 (the cube runtime's convention), so it runs through the
same launch path as ember's kernels.
"""

from __future__ import annotations

_HEAD = """@group(0) @binding(0) var<storage, read> in0: array<{t}>;
@group(0) @binding(1) var<storage, read> in1: array<{t}>;
@group(0) @binding(2) var<storage, read_write> out0: array<{t}>;
@group(1) @binding(0) var<storage, read> info: array<u32>;
"""

#: info: M, N, K, A batch stride, B batch stride. Grid: (ceil(N/16), ceil(M/16), batch).
NAIVE = (
    _HEAD.format(t="f32")
    + """
@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let m = info[0]; let n = info[1]; let kdim = info[2];
    let r = g.y; let c = g.x;
    if (r >= m || c >= n) { return; }
    let ao = g.z * info[3] + r * kdim;
    let bo = g.z * info[4] + c;
    var acc = 0.0;
    for (var k = 0u; k < kdim; k++) {
        acc += in0[ao + k] * in1[bo + k * n];
    }
    out0[(g.z * m + r) * n + c] = acc;
}
"""
)


def tiled(rows: int) -> str:
    """A 64-column tile of ``16 * rows`` rows, 16 deep; each of 256 invocations keeps
    ``rows`` x 4 outputs in vec4 registers. info as :data:`NAIVE`; grid
    (ceil(N/64), ceil(M/(16 * rows)), batch)."""
    bm = 16 * rows
    a_per = bm * 16 // 256
    acc = "\n".join(f"    var acc{i} = vec4<f32>(0.0);" for i in range(rows))
    fmas = "\n".join(f"            acc{i} += a{i // 4}[{i % 4}] * b;" for i in range(rows))
    a_reads = "\n".join(
        f"            let a{q} = sa[kk * {bm // 4}u + ty * {rows // 4}u + {q}u];" for q in range(rows // 4)
    )
    stores = "\n".join(
        f"""    {{
        let r = row0 + ty * {rows}u + {i}u;
        if (r < m) {{
            for (var j = 0u; j < 4u; j++) {{
                let c = col0 + tx * 4u + j;
                if (c < n) {{ out0[(g.z * m + r) * n + c] = acc{i}[j]; }}
            }}
        }}
    }}"""
        for i in range(rows)
    )
    return (
        _HEAD.format(t="f32")
        + f"""
var<workgroup> sa: array<vec4<f32>, {16 * bm // 4}>;
var<workgroup> sb: array<vec4<f32>, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    let m = info[0]; let n = info[1]; let kdim = info[2];
    let ao = g.z * info[3]; let bo = g.z * info[4];
    let row0 = g.y * {bm}u; let col0 = g.x * 64u;
    let tx = lid % 16u; let ty = lid / 16u;
{acc}
    for (var k0 = 0u; k0 < kdim; k0 += 16u) {{
        for (var l = 0u; l < {a_per}u; l++) {{
            let e = lid + l * 256u;
            let kk = e / {bm}u; let r = e % {bm}u;
            var v = 0.0;
            if (row0 + r < m && k0 + kk < kdim) {{ v = in0[ao + (row0 + r) * kdim + k0 + kk]; }}
            sa[kk * {bm // 4}u + r / 4u][r % 4u] = v;
        }}
        for (var l = 0u; l < 4u; l++) {{
            let e = lid + l * 256u;
            let kk = e / 64u; let c = e % 64u;
            var v = 0.0;
            if (k0 + kk < kdim && col0 + c < n) {{ v = in1[bo + (k0 + kk) * n + col0 + c]; }}
            sb[kk * 16u + c / 4u][c % 4u] = v;
        }}
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {{
{a_reads}
            let b = sb[kk * 16u + tx];
{fmas}
        }}
        workgroupBarrier();
    }}
{stores}
}}
"""
    )


TILED_4X4 = tiled(4)
TILED_8X4 = tiled(8)

#: info: the number of vec4s. Grid: 1-D, or 2-D over the per-dimension limit.
ADD_VEC4 = """@group(0) @binding(0) var<storage, read> in0: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> in1: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out0: array<vec4<f32>>;
@group(1) @binding(0) var<storage, read> info: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = g.x + g.y * nwg.x * 256u;
    if (i < info[0]) { out0[i] = in0[i] + in1[i]; }
}
"""
