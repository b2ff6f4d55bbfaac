"""The workloads of ``benchmarks/gpu.py`` and the capture of the kernel launches a cube
backend makes for each.

This file imports nothing from ``ember`` at module level and talks to a backend only
through its protocol methods, so that ``gpu.py`` can run it in a child process against
another checkout of ember (``--baseline``: the code before a change) and replay that
checkout's kernels in its own process, beside the current ones.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np


def matmul_case(name: str, m: int, k: int, n: int, batch_a=(), batch_b=(), ta=False, tb=False) -> dict:
    """``a @ b`` with ``a`` [*batch_a, m, k], ``b`` [*batch_b, k, n]; ``ta``/``tb`` store
    an operand transposed (a view with swapped strides, as autodiff's backward makes)."""
    return {
        "kind": "matmul",
        "name": name,
        "m": m,
        "k": k,
        "n": n,
        "batch_a": list(batch_a),
        "batch_b": list(batch_b),
        "ta": ta,
        "tb": tb,
    }


def flops(case: dict) -> float:
    """Floating-point operations of a case (matmul, conv), else 0."""
    if case["kind"] == "matmul":
        batch = math.prod(np.broadcast_shapes(tuple(case["batch_a"]), tuple(case["batch_b"])))
        return 2.0 * batch * case["m"] * case["k"] * case["n"]
    if case["kind"] == "conv":
        n, c, h, w = case["x"]
        co, _, kh, kw = case["w"]
        return 2.0 * n * co * c * kh * kw * h * w  # 'same' padding, stride 1
    return 0.0


def moved_bytes(case: dict) -> float:
    """Bytes an ideal kernel reads and writes (elementwise, reductions)."""
    if case["kind"] in ("add", "fused"):
        return 3 * 4.0 * case["n"]
    if case["kind"] == "sum_rows":
        rows, cols = case["shape"]
        return 4.0 * (rows * cols + rows)
    if case["kind"] in ("softmax", "log_softmax"):
        return 2 * 4.0 * math.prod(case["shape"])
    return 0.0


def inputs(case: dict) -> list[np.ndarray]:
    """The host arrays a case uploads, from a generator seeded by its name."""
    rng = np.random.default_rng(sum(map(ord, case["name"])))

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    kind = case["kind"]
    if kind == "matmul":
        m, k, n = case["m"], case["k"], case["n"]
        a = normal(*case["batch_a"], k, m) if case["ta"] else normal(*case["batch_a"], m, k)
        b = normal(*case["batch_b"], n, k) if case["tb"] else normal(*case["batch_b"], k, n)
        return [a, b]
    if kind in ("add", "fused"):
        return [normal(case["n"]), normal(case["n"])]
    if kind in ("sum_rows", "softmax", "log_softmax"):
        return [normal(*case["shape"])]
    if kind == "conv":
        return [normal(*case["x"]), normal(*case["w"]), normal(case["w"][0])]
    raise ValueError(kind)


def run_op(backend, case: dict, prims: list):
    """Run a case's op on ``backend`` with the uploaded primitives; its result."""
    from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp

    kind = case["kind"]
    if kind == "matmul":
        a, b = prims
        if case["ta"]:
            a = backend.permute(a, tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2))
        if case["tb"]:
            b = backend.permute(b, tuple(range(b.ndim - 2)) + (b.ndim - 1, b.ndim - 2))
        return backend.matmul(a, b)
    if kind == "add":
        return backend.binary(BinaryOp.ADD, *prims)
    if kind == "fused":  # one unary and one binary op: two launches unless fused
        return backend.binary(BinaryOp.MUL, backend.unary(UnaryOp.EXP, prims[0]), prims[1])
    if kind == "sum_rows":
        return backend.reduce(ReduceOp.SUM, prims[0], 1)
    if kind == "softmax":
        return backend.softmax(prims[0], 1)
    if kind == "log_softmax":
        return backend.log_softmax(prims[0], 1)
    if kind == "conv":
        x, w, bias = prims
        pad = case["w"][2] // 2
        return backend.conv(x, w, bias, (1, 1), ((pad, pad), (pad, pad)), (1, 1), 1)
    raise ValueError(kind)


def reference(case: dict, arrays: list[np.ndarray]) -> np.ndarray:
    """The float64 numpy result of a case."""
    x = [a.astype(np.float64) for a in arrays]
    kind = case["kind"]
    if kind == "matmul":
        a, b = x
        if case["ta"]:
            a = np.swapaxes(a, -1, -2)
        if case["tb"]:
            b = np.swapaxes(b, -1, -2)
        return a @ b
    if kind == "add":
        return x[0] + x[1]
    if kind == "fused":
        return np.exp(x[0]) * x[1]
    if kind == "sum_rows":
        return x[0].sum(axis=1, keepdims=True)
    if kind in ("softmax", "log_softmax"):
        z = x[0] - x[0].max(axis=1, keepdims=True)
        log = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return log if kind == "log_softmax" else np.exp(log)
    if kind == "conv":
        xs, w, bias = x
        n, _, h, wd = xs.shape
        co, _, kh, kw = w.shape
        p = kh // 2
        padded = np.pad(xs, ((0, 0), (0, 0), (p, p), (p, p)))
        out = np.zeros((n, co, h, wd))
        for i in range(kh):
            for j in range(kw):
                out += np.einsum("nchw,oc->nohw", padded[:, :, i : i + h, j : j + wd], w[:, :, i, j])
        return out + bias[None, :, None, None]
    raise ValueError(kind)


def capture(backend, case: dict):
    """Run ``case`` once on ``backend`` and record its launches.

    Returns ``(launches, buffers, result, keep)``: ``launches`` a list of ``(kernel,
    [buffer number], info, groups)``; ``buffers`` a list of ``(block, size, input
    number or None)``; ``result`` the op's output; ``keep`` objects that must stay
    alive while the launches are replayed."""
    runtime = backend.runtime
    arrays = inputs(case)
    prims = [backend.from_numpy(a) for a in arrays]
    numbers: dict[int, int] = {}
    buffers: list = []
    for i, p in enumerate(prims):
        numbers[id(p.buffer)] = len(buffers)
        buffers.append((p.buffer, p.buffer.size, i))
    launches = []
    original = runtime.launch3

    def hook(kernel, blocks, info, groups):
        ids = []
        for block in blocks:
            if id(block) not in numbers:
                numbers[id(block)] = len(buffers)
                buffers.append((block, block.size, None))
            ids.append(numbers[id(block)])
        launches.append((kernel, ids, list(info), tuple(groups)))
        original(kernel, blocks, info, groups)

    runtime.launch3 = hook
    try:
        result = run_op(backend, case, prims)
    finally:
        del runtime.launch3
    runtime.sync()
    return launches, buffers, result, (prims, result)


def _child(baseline_cases: list[dict]) -> None:
    """In a child process whose ``ember`` is the baseline checkout: print each case's
    launches as JSON (kernel sources, parameter blocks, grids, buffer sizes)."""
    from ember import Device, DeviceKind

    backend = Device.wgpu(DeviceKind.DEFAULT).backend
    backend.ensure_ready()
    out = []
    for case in baseline_cases:
        launches, buffers, result, keep = capture(backend, case)
        got = backend.to_numpy(result)
        want = reference(case, inputs(case))
        error = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
        out.append(
            {
                "name": case["name"],
                "launches": [
                    {
                        "name": k.name,
                        "source": k.source,
                        "n_in": k.n_in,
                        "n_out": k.n_out,
                        "buffers": ids,
                        "info": info,
                        "groups": list(groups),
                    }
                    for k, ids, info, groups in launches
                ],
                "buffers": [{"size": size, "input": inp} for _, size, inp in buffers],
                "error": error,
            }
        )
        del keep
    json.dump(out, sys.stdout)


if __name__ == "__main__":  # the child: cases as JSON on stdin
    _child(json.load(sys.stdin))
