"""What the matmul templates share: the parameter block, how each operand is read
(its access mode), the per-batch offsets, and the epilogue.

Operands are ``A`` ``[M, K]`` and ``B`` ``[K, N]`` (per batch). Each is read in one of
three modes, chosen in :func:`operand_mode` from its strides:

* ``"k"``: contiguous along K; bound as ``array<vec4<f32>>``, read four K steps at a time;
* ``"o"``: contiguous along its outer dim (M for A, N for B); ``array<vec4<f32>>``, read
  four rows (A) or columns (B) at a time;
* ``"s"``: any strides (and every non-f32 storage): scalar loads through the strides.

An epilogue is a kernel-IR :class:`~ember.backend.kernel.exprs.Expr` applied to each output element
before it is stored: ``load(0)`` is the product, ``load(j)`` (j >= 1) the element of the
``j``-th extra operand at the same position (broadcast to the output's shape), and
``scalar(k)`` a launch scalar. ``linear``'s bias is ``load(0) + load(1)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.backend.cube import wgsl
from ember.backend.cube.dtypes import Storage
from ember.backend.cube.ir import Emitter, Expr, type_of

MR = wgsl.MAX_RANK
#: info: M, N, K, batch count, batch base, column-tile base, row-tile base, batch rank,
#: batch shape[MR]; then per operand (A, B, extra operands) a block of
#: [offset, row stride, column stride, batch strides[MR]]; then the epilogue's scalars
#: (two words each).
HEAD = 8 + MR
BLOCK = 3 + MR


def block_at(j: int) -> int:
    """The info position of operand ``j``'s block (0: A, 1: B, 2...: extra operands)."""
    return HEAD + j * BLOCK


def scalars_at(n_operands: int) -> int:
    return HEAD + n_operands * BLOCK


def vectorisable(storage: Storage) -> bool:
    """Whether a storage's words can be read as ``vec4`` of its compute type."""
    return storage.wgsl == "f32" and storage.load == "{x}"


def operand_mode(
    storage: Storage,
    outer: int,
    kdim: int,
    outer_stride: int,
    k_stride: int,
    offset: int,
    batch_strides: tuple[int, ...],
    vec_outer: int,
) -> str:
    """``"k"``, ``"o"`` or ``"s"`` (see the module doc). ``vec_outer`` is how many of
    the outer dim's elements one thread reads together (4 unless the template says less)."""
    if not vectorisable(storage) or offset % 4 or any(s % 4 for s in batch_strides):
        return "s"
    if kdim % 4 == 0 and k_stride == 1 and (outer_stride % 4 == 0 or outer == 1):
        return "k"
    if outer % vec_outer == 0 and outer_stride == 1 and (k_stride % 4 == 0 or kdim == 1):
        return "o"
    return "s"


@dataclass(frozen=True)
class EpilogueSpec:
    """The generation-time part of an epilogue: its expression and operand storages,
    and the expressions (with storages) of any further outputs (``out1``, ...), stored
    at the same element from the same values (a fused optimizer update of a gradient)."""

    expr: Expr
    storages: tuple[Storage, ...]
    scalar_types: tuple[str, ...]
    outputs: tuple[tuple[Expr, Storage], ...] = ()

    def output_types(self) -> list[Storage]:
        return [st for _, st in self.outputs]


def binding_types(
    a: Storage,
    a_mode: str,
    b: Storage,
    b_mode: str,
    extra: tuple[Storage, ...],
    out: Storage,
    out_vec: bool,
    spec: EpilogueSpec | None = None,
) -> tuple[list[str], list[str]]:
    """WGSL element types of the inputs and the outputs (the product's, then the
    epilogue's further outputs, one element each)."""

    def elem(st: Storage, vec: bool) -> str:
        return f"vec4<{st.wgsl}>" if vec else st.wgsl

    ins = [elem(a, a_mode in "ko"), elem(b, b_mode in "ko")] + [s.wgsl for s in extra]
    more = [st.wgsl for st in spec.output_types()] if spec is not None else []
    return ins, [elem(out, out_vec)] + more


def batch_offsets(n_operands: int, batch: str = "batch") -> list[str]:
    """Statements that set ``base{j}`` (i32) to operand ``j``'s offset in batch ``batch``."""
    lines = [f"    var rem = {batch};"]
    for j in range(n_operands):
        lines.append(f"    var base{j}: i32 = bitcast<i32>(info[{block_at(j)}u]);")
    lines += [
        "    for (var d1 = info[7]; d1 > 0u; d1--) {",
        "        let d = d1 - 1u;",
        "        let size = info[8u + d];",
        "        let q = i32(rem % size);",
        "        rem = rem / size;",
    ]
    for j in range(n_operands):
        lines.append(f"        base{j} += q * bitcast<i32>(info[{block_at(j) + 3}u + d]);")
    lines.append("    }")
    return lines


def epilogue_function(spec: EpilogueSpec | None, ctype: str, out: Storage) -> str:
    """``fn epi(v, batch, r, c) -> word``: the epilogue applied to product ``v`` at row
    ``r``, column ``c``, converted to the output's storage word (further outputs are
    stored there too). Extra operands are read through private offsets ``eo{j}`` set per
    batch in ``main``."""
    n_extra = len(spec.storages) if spec is not None else 0
    lines = [f"var<private> eo{j}: i32;" for j in range(n_extra)]
    lines.append(f"fn epi(v: {ctype}, batch: u32, r: u32, c: u32) -> {out.wgsl} {{")
    if spec is None:
        lines.append(f"    return {wgsl.store(out, wgsl.convert('v', ctype, out.compute))};")
        lines.append("}")
        return "\n".join(lines)
    lines.append("    let gi = (batch * info[0] + r) * info[1] + c;")
    loads = {0: "v"}
    for j, st in enumerate(spec.storages):
        pos = block_at(2 + j)
        index = f"u32(eo{j} + i32(r) * bitcast<i32>(info[{pos + 1}u]) + i32(c) * bitcast<i32>(info[{pos + 2}u]))"
        loads[j + 1] = wgsl.load(st, f"in{2 + j}", index)
    first = scalars_at(2 + n_extra)
    emitter = Emitter(loads, {k: first + 2 * k for k in range(len(spec.scalar_types))})
    value = emitter.emit(spec.expr)
    stores = []
    for j, (expr, st) in enumerate(spec.outputs):
        more = emitter.emit(expr)
        stores.append(f"    out{1 + j}[gi] = {wgsl.store(st, wgsl.convert(more, type_of(expr), st.compute))};")
    lines += emitter.lines + stores
    lines.append(f"    return {wgsl.store(out, wgsl.convert(value, type_of(spec.expr), out.compute))};")
    lines.append("}")
    return "\n".join(lines)


def zero_vec(ctype: str) -> str:
    return f"vec4<{ctype}>({wgsl.ZERO[ctype]})"


def madd(ctype: str, a: str, b: str, acc: str) -> str:
    """``acc + a * b`` on vec4s: one ``fma`` for floats."""
    if ctype == "f32":
        return f"fma({a}, {b}, {acc})"
    return f"({acc} + {a} * {b})"


def store_lines(ctype: str, rows: list[tuple[str, str]], col: str, out_vec: bool, indent: str = "    ") -> list[str]:
    """Stores of accumulator rows ``(row expression, accumulator name)`` at columns
    ``col .. col + 3`` of the output, each through ``epi`` and bounds-checked."""
    lines = []
    for row, acc in rows:
        lines.append(f"{indent}if ({row} < m) {{")
        lines.append(f"{indent}    let o = (batch * m + {row}) * n + {col};")
        if out_vec:
            comps = ", ".join(f"epi({acc}.{x}, batch, {row}, {col} + {i}u)" for i, x in enumerate("xyzw"))
            lines.append(f"{indent}    if ({col} < n) {{ out0[o >> 2u] = vec4({comps}); }}")
        else:
            for i, x in enumerate("xyzw"):
                lines.append(
                    f"{indent}    if ({col} + {i}u < n) {{ out0[o + {i}u] = epi({acc}.{x}, batch, {row}, {col} + {i}u); }}"
                )
        lines.append(f"{indent}}}")
    return lines
