"""Fused optimizer and loss kernels: one Adam/AdamW update per tensor in a single
launch (instead of a dozen elementwise ones; the math is the composite's, in
``ember.optim.adam``), and the mean squared error as one
elementwise pass plus one reduction."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ember.backend.cube import ir, wgsl
from ember.backend.cube.buffer import CubeTensor
from ember.backend.cube.cache import KernelSource
from ember.backend.cube.dtypes import Storage, scalar_word
from ember.backend.cube.kernels import elementwise, layout, reduce
from ember.backend.ops import BinaryOp, ReduceOp

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext


def _adam_source(st: Storage, first: bool, amsgrad: bool, decay: str) -> KernelSource:
    """Bindings: param, grad, [m, v, [v_max]] in; param', m', v', [v_max'] out."""
    n_in = 2 + (0 if first else 2 + int(amsgrad))
    ins = [st] * n_in
    outs = [st] * (3 + int(amsgrad))
    load = lambda i: wgsl.load(st, f"in{i}", "gi")  # noqa: E731
    lines = [
        "    if (gi >= info[0]) { return; }",
        "    let b1 = bitcast<f32>(info[1]); let b2 = bitcast<f32>(info[2]);",
        "    let one_b1 = bitcast<f32>(info[3]); let one_b2 = bitcast<f32>(info[4]);",
        "    let eps = bitcast<f32>(info[5]); let wd = bitcast<f32>(info[6]); let keep = bitcast<f32>(info[7]);",
        "    let sqrt_c2 = bitcast<f32>(info[8]); let step = bitcast<f32>(info[9]);",
        f"    let p = {load(0)};",
        f"    var g = {load(1)};",
    ]
    if decay == "l2":
        lines.append("    g = g + p * wd;")
    if first:
        lines += ["    let m = g * one_b1;", "    let v = (g * g) * one_b2;"]
    else:
        lines += [f"    let m = {load(2)} * b1 + g * one_b1;", f"    let v = {load(3)} * b2 + (g * g) * one_b2;"]
    src = "v"
    if amsgrad:
        lines.append("    let vm = v;" if first else f"    let vm = max_f({load(4)}, v);")
        src = "vm"
    lines += [
        f"    let denom = sqrt({src}) / sqrt_c2 + eps;",
        "    let update = (m / denom) * step;",
        "    let out = p * keep - update;" if decay == "decoupled" else "    let out = p - update;",
        f"    out0[gi] = {wgsl.store(st, 'out')};",
        f"    out1[gi] = {wgsl.store(st, 'm')};",
        f"    out2[gi] = {wgsl.store(st, 'v')};",
    ]
    if amsgrad:
        lines.append(f"    out3[gi] = {wgsl.store(st, 'vm')};")
    body = wgsl.main_linear("\n".join(lines))
    source = "\n".join([wgsl.bindings(ins, outs), wgsl.helpers_for(body + st.store), body])
    return KernelSource("adam_step", source, n_in, len(outs))


def _adam_one(
    backend: KernelContext,
    param,
    grad,
    moment_1,
    moment_2,
    max_moment_2,
    *,
    lr,
    beta_1,
    beta_2,
    epsilon,
    weight_decay,
    decoupled,
    amsgrad,
    time,
):
    """One launch of :func:`_adam_source` on one tensor, or ``NotImplemented``."""
    st = param.storage
    if st.compute != "f32" or grad.storage != st:
        return NotImplemented
    first = moment_1 is None
    decay = "none" if not weight_decay else ("decoupled" if decoupled else "l2")
    ams = bool(amsgrad)
    has_max = ams and max_moment_2 is not None and not first
    inputs = [param, grad] + ([] if first else [moment_1, moment_2] + ([max_moment_2] if ams else []))
    if ams and not first and not has_max:
        return NotImplemented
    if len(inputs) + 3 + int(ams) + 1 > backend.runtime.max_storage_buffers:
        return NotImplemented  # an adapter with few storage bindings runs the composite
    inputs = [layout.contiguous(backend, x) for x in inputs]
    shape = param.shape
    outs = [backend.empty(shape, st) for _ in range(3 + int(ams))]
    n = param.size
    if n == 0:
        return outs[0], outs[1], outs[2], outs[3] if ams else None
    kernel = backend.cache.get(("adam", st, first, ams, decay), lambda: _adam_source(st, first, ams, decay))
    # Scalars are formed in double precision, as the composite's Python scalars are.
    scalars = [
        beta_1,
        beta_2,
        1.0 - beta_1,
        1.0 - beta_2,
        epsilon,
        weight_decay,
        1.0 - lr * weight_decay,
        math.sqrt(1.0 - beta_2**time),
        lr / (1.0 - beta_1**time),
    ]
    info = [n] + [scalar_word(float(s), "f32") for s in scalars]
    backend.runtime.launch(kernel, [x.buffer for x in inputs] + [o.buffer for o in outs], info, -(-n // wgsl.WORKGROUP))
    return outs[0], outs[1], outs[2], outs[3] if ams else None


def adam_step_many(backend: KernelContext, params, grads, moments_1, moments_2, max_moments_2, **options):
    """``Backend.adam_step_many``: one launch per tensor (the composite's math, in f32)."""

    def pick(xs, i):
        return None if xs is None else xs[i]

    results = []
    for i, p in enumerate(params):
        out = _adam_one(backend, p, grads[i], pick(moments_1, i), pick(moments_2, i), pick(max_moments_2, i), **options)
        if out is NotImplemented:
            return NotImplemented
        results.append(out)
    new, m, v, vm = (list(col) for col in zip(*results))
    return new, m, v, (vm if options["amsgrad"] else None)


def mse_loss(backend: KernelContext, pred: CubeTensor, target: CubeTensor, mean: bool) -> CubeTensor:
    """``sum((pred - target)^2)`` (``/ n`` when ``mean``) with shape ``[1]``."""
    if pred.storage.compute != "f32":
        return NotImplemented
    diff = ir.binary(BinaryOp.SUB, ir.load(0, "f32"), ir.load(1, "f32"))
    squares = elementwise.run(
        backend, ir.binary(BinaryOp.MUL, diff, diff), [pred, target], backend.storage_f32(), pred.shape
    )
    flat = squares.view((squares.size,), (1,), 0)
    total = reduce.reduce(backend, ReduceOp.MEAN if mean else ReduceOp.SUM, flat, 0)
    if pred.storage != total.storage:
        total = backend.cast(total, pred.storage.dtype)
    return total
