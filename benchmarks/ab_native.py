"""Before/after: flex's native row kernels (GELU, softmax rows, layer norm, the LSTM
cell, forward and backward) from two source trees, in one process, alternating rounds.

    OPENBLAS_NUM_THREADS=1 python benchmarks/ab_native.py --base main --rounds 15

``--base`` is a git revision (exported to a temporary directory) or a directory; the
"after" tree is this checkout. Each tree prints its native module's LLVM IR (in a
process of its own); both modules are compiled here with the options flex uses, and
each kernel is timed on the same inputs, before and after in turn (the order flips
every round), taking CPU time (``time.process_time``) per call. The table gives the
medians over rounds and the median of the per-round after/before ratios, and
whether the outputs of both are bit-identical (NaN payloads included).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRINT_IR = "import sys; sys.path.insert(0, sys.argv[1]); from ember.backend.flex import native; print(native._module())"
NAMES = [
    "ember_gelu",
    "ember_gelu_backward",
    "ember_softmax_rows",
    "ember_layer_norm",
    "ember_layer_norm_backward",
    "ember_lstm_cell",
    "ember_lstm_cell_backward",
]


def module_ir(root: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", PRINT_IR, root], capture_output=True, text=True, check=True, env=env, cwd=root
    ).stdout


def cases(rng: np.random.Generator, keep: list[np.ndarray]) -> list[tuple[str, str, list, list[np.ndarray]]]:
    """``(label, function, arguments, outputs)``: arrays as addresses (held in ``keep``),
    sizes as ints."""
    f32 = np.float32

    def a(array: np.ndarray) -> int:
        keep.append(array)
        return array.ctypes.data

    out = []
    x = rng.standard_normal(1 << 20).astype(f32) * 3
    g = rng.standard_normal(1 << 20).astype(f32)
    y = np.empty_like(x)
    out.append(("gelu 1M", "ember_gelu", [a(x), a(y), x.size], [y]))
    dy = np.empty_like(x)
    out.append(("gelu_backward 1M", "ember_gelu_backward", [a(x), a(g), a(dy), x.size], [dy]))
    for rows, cols, masked in ((4096, 256, True), (512, 1024, False)):
        s = rng.standard_normal((rows, cols)).astype(f32) * 4
        if masked:
            s[:, cols // 2 :] = -1e4  # masked attention scores
        o = np.empty_like(s)
        out.append((f"softmax {rows}x{cols}", "ember_softmax_rows", [a(s), a(o), rows, cols, 1], [o]))
    rows, cols = 4096, 768
    x2 = rng.standard_normal((rows, cols)).astype(f32)
    gamma, beta = rng.standard_normal(cols).astype(f32), rng.standard_normal(cols).astype(f32)
    o2, mean, rstd = np.empty_like(x2), np.empty(rows, f32), np.empty(rows, f32)
    args = [a(x2), a(gamma), a(beta), a(o2), a(mean), a(rstd), rows, cols, ctypes.c_float(1e-5)]
    out.append((f"layer_norm {rows}x{cols}", "ember_layer_norm", args, [o2, mean, rstd]))
    g2 = rng.standard_normal((rows, cols)).astype(f32)
    dx, dgamma, dbeta = np.empty_like(x2), np.zeros(cols, f32), np.zeros(cols, f32)
    # mean/rstd: fixed values (the forward's, from whichever tree ran it last is not the point)
    m_in, r_in = x2.mean(axis=1).astype(f32), (1 / x2.std(axis=1)).astype(f32)
    args = [a(x2), a(gamma), a(m_in), a(r_in), a(g2), a(dx), a(dgamma), a(dbeta), rows, cols, 1]
    out.append((f"layer_norm_backward {rows}x{cols} (dx)", "ember_layer_norm_backward", args, [dx]))
    rows, n = 256, 512
    z = rng.standard_normal((rows, 4 * n)).astype(f32) * 2
    c = rng.standard_normal((rows, n)).astype(f32)
    h, c_new = np.empty_like(c), np.empty_like(c)
    out.append((f"lstm_cell {rows}x{n}", "ember_lstm_cell", [a(z), a(c), a(h), a(c_new), rows, n], [h, c_new]))
    gh, gc = rng.standard_normal((rows, n)).astype(f32), rng.standard_normal((rows, n)).astype(f32)
    d_z, d_c = np.empty_like(z), np.empty_like(c)
    c_after = np.tanh(c).astype(f32)
    args = [a(z), a(c), a(c_after), a(gh), a(gc), a(d_z), a(d_c), rows, n]
    out.append((f"lstm_cell_backward {rows}x{n}", "ember_lstm_cell_backward", args, [d_z, d_c]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="git revision or directory of the 'before' tree")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20, help="calls per kernel per round")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from ember.backend.kernel.llvm import jit

    with tempfile.TemporaryDirectory() as tmp:
        base = args.base
        if not os.path.isdir(base):
            archive = subprocess.run(["git", "-C", ROOT, "archive", base], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            base = tmp
        texts = {"before": module_ir(base), "after": module_ir(ROOT)}
    compiled = {k: jit.compile_module(t, NAMES, unroll=True, codegen_opt=3) for k, t in texts.items()}
    keep: list[np.ndarray] = []
    work = cases(np.random.default_rng(0), keep)
    fns: dict[tuple[str, str], object] = {}
    for key, c in compiled.items():
        for label, name, call_args, _ in work:
            types = [ctypes.c_float if isinstance(v, ctypes.c_float) else ctypes.c_int64 for v in call_args]
            fns[(key, label)] = ctypes.CFUNCTYPE(None, *types)(c.addresses[name])
    times: dict[tuple[str, str], list[float]] = {k: [] for k in fns}
    identical: dict[str, bool] = {}
    for label, _, call_args, outs in work:  # outputs of both, bit for bit
        results = []
        for key in ("before", "after"):
            fns[(key, label)](*call_args)
            results.append([o.copy() for o in outs])
        identical[label] = all(b.tobytes() == a.tobytes() for b, a in zip(*results))
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for label, _, call_args, _ in work:
            for key in order:
                fn = fns[(key, label)]
                fn(*call_args)  # warm
                start = time.process_time()
                for _ in range(args.calls):
                    fn(*call_args)
                times[(key, label)].append((time.process_time() - start) / args.calls * 1e6)
    print(f"{'kernel':42} {'before us':>10} {'after us':>10} {'ratio':>7}  bits")
    for label, *_ in work:
        before, after = times[("before", label)], times[("after", label)]
        ratio = statistics.median(a / b for a, b in zip(after, before))
        same = "identical" if identical[label] else "DIFFER"
        print(f"{label:42} {statistics.median(before):10.1f} {statistics.median(after):10.1f} {ratio:7.3f}  {same}")


if __name__ == "__main__":
    main()
