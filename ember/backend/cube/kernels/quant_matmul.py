"""Weight-only quantized matmul on the GPU: ``x @ dequantize(weight).T + bias`` reading
the packed int8 / int4 weight and dequantizing it in registers.

The weight is ``ember.tensor.quant``'s layout, ``[d_out, d_in]`` with a scale (and a
zero point) per tensor, per row or per group of ``g`` values along the row. On cube an
int8 or uint8 value is held in one ``i32`` word (see :mod:`ember.backend.cube.dtypes`),
and an int4 byte is one word holding two nibbles: byte ``j`` of a group holds value ``j``
in its low nibble and value ``j + g/2`` in its high nibble. One invocation computes the
outputs of one column for ``tm`` rows (1 at decode, else 4, so that each
weight value is read and dequantized once for them): for each group it sums
``x * (q - z)`` over the group's values, unpacking the nibbles with a mask and a shift,
and adds ``s * sum`` (one multiply by the scale per group), then the bias. No float
weight is written to memory.

Only weight-only schemes and at most :data:`MAX_ROWS` rows run here (decode, small
batches); prefill and the activation-quantized schemes (``"dynamic"``, ``"static"``)
take the composite (dequantize, then the tiled float matmul).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.kernels import layout

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

_WG = wgsl.WORKGROUP
#: The most rows the kernel takes. With more, each weight value is reused too little
#: against the tiled float matmul, and dequantizing once then multiplying wins. Measured on
#: Mesa's llvmpipe, [m, 1024] x [1024, 1024] (medians of 9): at 1 row the kernel is
#: 6-13x faster than the composite, at 16 on par (int8) or 2x faster (int4), at 32 1.7x
#: slower (int8), at 128 2-3x slower. flex switches to a dequantized tile at 32 rows too.
MAX_ROWS = 16


def _source(value: str, zero_points: bool, bias: bool, per_tensor: bool, tm: int) -> KernelSource:
    """The kernel for one kind of weight and ``tm`` rows per invocation (the sizes are
    parameters: ``info``)."""
    z = "in3" if zero_points else None
    b = "in4" if zero_points and bias else ("in3" if bias else None)
    scale_at = "0u" if per_tensor else "n * groups + gi_"
    if z is not None:
        zero = f"f32({z}[{scale_at}])"
    else:
        zero = "8.0" if value == "int4" else "0.0"
    rows = range(tm)
    if value == "int4":
        inner = [
            "        let h = g >> 1u;",
            "        let vb = vrow + gi_ * h;",
            "        for (var j = 0u; j < h; j++) {",
            "            let w = in1[vb + j];",
            "            let lo = f32(w & 15) - z;",
            "            let hi = f32((w >> 4u) & 15) - z;",
            *(f"            part{i} = part{i} + in0[xb{i} + j] * lo + in0[xb{i} + j + h] * hi;" for i in rows),
            "        }",
        ]
    else:
        inner = [
            "        let vb = vrow + gi_ * g;",
            "        for (var j = 0u; j < g; j++) {",
            "            let q = f32(in1[vb + j]) - z;",
            *(f"            part{i} = part{i} + in0[xb{i} + j] * q;" for i in rows),
            "        }",
        ]
    body = [
        "    if (gi >= info[0]) { return; }",
        "    let n_out = info[1]; let k = info[2]; let g = info[3]; let kb = info[4]; let m = info[5];",
        "    let groups = k / g;",
        f"    let r0 = (gi / n_out) * {tm}u; let n = gi % n_out;",
        "    let vrow = n * kb;",
        # rows past the last are clamped to it (no bounds checks in the loop); only stores check
        *(f"    let xrow{i} = min(r0 + {i}u, m - 1u) * k; var acc{i} = 0.0;" for i in rows),
        "    for (var gi_ = 0u; gi_ < groups; gi_++) {",
        f"        let s = in2[{scale_at}];",
        f"        let z = {zero};",
        *(f"        let xb{i} = xrow{i} + gi_ * g; var part{i} = 0.0;" for i in rows),
        *inner,
        *(f"        acc{i} = acc{i} + s * part{i};" for i in rows),
        "    }",
    ]
    add = f" + {b}[n]" if b is not None else ""
    body += [f"    if (r0 + {i}u < m) {{ out0[(r0 + {i}u) * n_out + n] = acc{i}{add}; }}" for i in rows]
    code = wgsl.main_linear("\n".join(body))
    inputs = ["f32", "i32", "f32"] + (["i32"] if zero_points else []) + (["f32"] if bias else [])
    flags = f"{'_z' if zero_points else ''}{'_b' if bias else ''}{'_t' if per_tensor else ''}"
    name = f"quantized_linear_{value}{flags}_r{tm}"
    return KernelSource(name, "\n".join([wgsl.bindings(inputs, ["f32"]), code]), len(inputs), 1)


def quantized_linear(
    backend: KernelContext,
    x: CubeTensor,
    values: CubeTensor,
    scales: CubeTensor,
    zero_points: CubeTensor | None,
    bias: CubeTensor | None,
    value: str,
    group: int,
) -> CubeTensor | None:
    """``x [..., d_in] @ dequantize(values).T + bias`` as ``[..., d_out]`` float32, or
    ``None`` where this kernel does not apply (a non-float32 operand, more than
    :data:`MAX_ROWS` rows)."""
    parts = [x, scales] + ([bias] if bias is not None else [])
    if any(p.storage.wgsl != "f32" for p in parts) or values.storage.wgsl != "i32":
        return None
    if zero_points is not None and zero_points.storage.wgsl != "i32":
        return None
    d_out, kb = values.shape
    d_in = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    if rows > MAX_ROWS or rows == 0:
        return None
    per_tensor = tuple(scales.shape) == (1, 1)
    tm = 1 if rows < 4 else 4  # rows sharing each dequantized weight value
    key = ("quantized_linear", value, zero_points is not None, bias is not None, per_tensor, tm)
    kernel = backend.cache.get(key, lambda: _source(value, zero_points is not None, bias is not None, per_tensor, tm))
    out = backend.empty((*x.shape[:-1], d_out), backend.storage_f32())
    operands = [x, values, scales] + [p for p in (zero_points, bias) if p is not None]
    dense = [layout.contiguous(backend, p) for p in operands]  # held until the launch is recorded
    buffers = [p.buffer for p in dense] + [out.buffer]
    total = -(-rows // tm) * d_out
    backend.runtime.launch(kernel, buffers, [total, d_out, d_in, group, kb, rows], -(-total // _WG))
    return out
