"""Recurrent training step: an LSTM classifier on ember/flex against PyTorch eager, in
one run (1 BLAS thread on both sides, alternating rounds, medians).

    python benchmarks/rnn.py              # the LSTM step: eager and ember.compile vs torch
    python benchmarks/rnn.py gru          # the same classifier with a GRU
    python benchmarks/rnn.py --profile    # cProfile of the ember eager step (top functions)
    python benchmarks/rnn.py --clock cpu  # process CPU time instead of wall-clock time

The workload (issue 27's "LSTM classifier"): a 2-layer LSTM (``batch_first``, hidden
128) over sequences of 64 steps of 32 features, batch 32, the last step's hidden state
through a linear head to 10 classes, cross-entropy, Adam; both sides start from the same
weights. ember eager runs on ``Device.flex().autodiff()``; the compiled step is the same
step function through ``ember.compile`` (reported as failed, with the error, when it
does not trace).

Targets (issue 27): eager at most 1.2x torch eager, compiled at most 0.8x.

Measured on the shared 2-core machine (load 6-12; this script run from main's and from
this checkout, one after the other): LSTM eager 4.82x -> 2.38x (260 -> 125 ms, torch
55 ms), compiled 3.46x -> 3.45x; GRU eager 1.81x -> 1.17x, compiled 1.35x -> 1.83x.
With the fused sequences (one call per direction, a library step when compiled; load
10-13, so each ratio varies by 0.3 between runs): LSTM eager 2.20x -> 1.16-1.48x,
compiled 3.12x -> 1.02-1.40x; GRU eager 0.93-1.03x, compiled 0.58-0.64x. torch's CPU LSTM
runs oneDNN's fused RNN primitive (``mkldnn_rnn_layer``, seen in torch's profiler); a
compiled LSTM direction forward takes 17 ms where its 64 step GEMMs alone take 14 ms
through OpenBLAS (numpy's and torch's ``mm`` time one such [32,128]x[128,512] GEMM alike,
~135 us), so the compiled target (0.8x) needs faster per-step GEMMs than OpenBLAS's.

The environment pins OpenBLAS to its AVX2 kernels on this AVX-512 machine
(``OPENBLAS_CORETYPE=Haswell``: 47 us per [32,128]x[128,512] step product, CPU time,
quiet; 31 us unpinned), while torch's oneDNN uses AVX-512. Before the inline products
(``--clock cpu``, load 0.7): eager 1.88x (36.4 ms), compiled 1.60x (31.2 ms), torch
19.5 ms; unpinned (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE``) eager 1.24x,
compiled 0.99x. With ``ember/backend/kernel/llvm/small_gemm.py`` (21 us per step product;
inline in the compiled plans' sequences and matmul steps, flex's native LSTM loop and
its linear layer) and ``--clock cpu`` at load 8-12, four runs: eager 1.03x, 1.07x,
1.06x, 1.11x; compiled 0.81x, 0.83x, 0.90x, 0.87x (torch 20.6-24 ms per step in these
runs: its time moves the ratio by 0.05-0.1 from run to run; the last two with the
dot-product form's 6 x 4 tiles, which ``ab_train_step.py`` measured at 0.925x of the
compiled step before them). ``benchmarks/ab_train_step.py --base main --clock cpu --workloads
lstm,lstmc,gruc`` (3 rounds, load 7-12): eager 45.7 -> 22.9 ms (0.55x), compiled 33.7
-> 18.8 ms (0.56x), GRU compiled 0.53x. GRU in this script (load 12): eager 0.77x,
compiled 0.38x (torch's GRU step is 48 ms here). After merging main (its own sgemm runs
in inference plans only), ``--clock cpu``, load 4-5, two runs: LSTM eager 1.06x, 1.06x
(19.4, 20.4 ms), compiled 0.85x, 0.88x (15.7, 16.9 ms), torch 18.8, 19.1 ms; GRU eager
0.70x, compiled 0.32x (torch 42.3 ms). The compiled LSTM step's remaining time (CPU
time, ``benchmarks/profile_compiled.py``'s per-step entries): the two directions'
backward 3.2 ms each (64 cell backward passes, 64 dZ w_hh^T products, d w_hh), forward
2.2 ms each (64 step products, 1.35 ms, and cells), the input gradient dY W_ih^T 1.9
ms, d W_ih 1.4 ms, the input projections 1.3 + 0.4 ms.

Then (issue 27 item 3, second pass): w_hh packed once per sequence into panels of one
register tile's width (forward about -0.5 ms per layer, backward -0.05 to -0.1 ms: A/B in
one process, 15 alternating rounds), the input gradient dZ W_ih^T over a packed W_ih^T
instead of dot products (-0.36 ms), and the input projections' bias added inside the
product (a training plan's ``linear`` as one library step: -0.25 ms). ``--clock cpu``,
alternating runs of 642d440 and this checkout, load 6-15, four runs each: compiled
0.94x, 0.85x, 0.91x, 0.89x -> 0.79x, 0.77x, 0.80x, 0.74x (17.7-17.9 ms at load 7-9,
torch 22.4-22.8 ms). Per-part time is in ``python benchmarks/profile_compiled.py --lstm
--steps --clock cpu``. Tried and dropped: the weight gradients over dZ copied one panel at
a time (1.15x as fast alone, 1.03x slower in the plan).

Third pass (issue 27): the per-step profile (load 1-2) put the cells at 1.6 ms of the
step (forward 0.73 ms, backward 0.85 ms: both directions of both layers; measured by
emitting the step without them) and nine eager calls (eight ``cat`` of the per-gate
weights, one ``slice_assign``) between ten compiled segments. Now ``cat`` and
``slice_assign`` are compiled copies (the step is one segment), the LSTM forward stores
its gates activated where only the plan's own backward reads them (the backward's cell
skips four of its five ``exp`` and divisions per element: 2.63 -> 2.42 ms per direction),
and weight gradients ``X^T dY`` run in 12-row register tiles on AVX-512 (7-8% faster
alone). ``--clock cpu``, alternating runs of 3180eb4 and this checkout, load 2-4, four
runs each: compiled 0.85x, 0.80x, 0.79x, 0.79x (13.2-15.6 ms) -> 0.73x, 0.72x, 0.70x,
0.73x (12.5-13.1 ms), torch 16.6-18.4 ms. What is left is mostly the products: about
2.5 GFLOP per step, 10 ms at this core's peak (256 GFLOP/s measured with 16
independent multiply-adds), and the forward's cells (5 ``exp`` and 5 divisions per
element, 0.35 ms per direction; computing four columns per iteration did not change it).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ember
from benchmarks.common import alternating_us, blas_line, fmt, print_table, try_import_torch, use_clock
from ember import Device, Module, Tensor
from ember.module.foreign import load_foreign
from ember.nn import GruConfig, Linear, LinearConfig, LstmConfig
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamConfig, GradientsParams

BATCH, SEQ, FEATURES, HIDDEN, LAYERS, CLASSES = 32, 64, 32, 128, 2, 10
REPEATS = 7


class Classifier(Module):
    """A recurrent stack and a linear head on the last step's hidden state."""

    rnn: Module
    head: Linear

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.rnn(x)
        return self.head(out.narrow(1, SEQ - 1, 1).reshape([BATCH, HIDDEN]))


def torch_twin(torch, kind: str):
    nn = torch.nn

    class TorchClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            cls = nn.LSTM if kind == "lstm" else nn.GRU
            self.rnn = cls(FEATURES, HIDDEN, num_layers=LAYERS, batch_first=True)
            self.head = nn.Linear(HIDDEN, CLASSES)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.head(out[:, -1])

    torch.manual_seed(0)
    return TorchClassifier()


def ember_twin(kind: str, device: Device, t_net) -> Classifier:
    """The classifier on ``device``, with ``t_net``'s weights when torch is there."""
    config = LstmConfig if kind == "lstm" else GruConfig
    model = Classifier(
        rnn=config(FEATURES, HIDDEN, num_layers=LAYERS).init(device), head=LinearConfig(HIDDEN, CLASSES).init(device)
    )
    if t_net is None:
        return model
    arrays = {k: v.detach().numpy().copy() for k, v in t_net.state_dict().items()}
    return load_foreign(model, arrays, source="torch", op="benchmark")[0]


def ember_step_fn(model: Classifier, x: Tensor, y: Tensor):
    optim, ce = AdamConfig(epsilon=1e-5).init(), CrossEntropyLoss()
    state = {"model": model}

    def step():
        m = state["model"]
        loss = ce.forward(m(x), y)
        loss.into_scalar()
        state["model"] = optim.step(1e-3, m, GradientsParams.from_grads(loss.backward(), m))

    return step


def compiled_step_fn(model: Classifier, x: Tensor, y: Tensor):
    optim, ce = AdamConfig(epsilon=1e-5).init(), CrossEntropyLoss()
    state = {"model": model}

    def train_step(m, x, y):
        loss = ce.forward(m(x), y)
        return optim.step(1e-3, m, GradientsParams.from_grads(loss.backward(), m)), loss

    compiled = ember.compile(train_step)

    def step():
        state["model"], loss = compiled(state["model"], x, y)
        loss.into_scalar()

    return step


def torch_step_fn(torch, net, x, y):
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-5)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.item()
        loss.backward()
        opt.step()

    return step


def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((BATCH, SEQ, FEATURES)).astype(np.float32), rng.integers(0, CLASSES, BATCH)


def run(kind: str, torch) -> None:
    x_np, y_np = data()
    device = Device.flex().autodiff()
    t_net = torch_twin(torch, kind) if torch is not None else None
    model = ember_twin(kind, device, t_net)
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    fns = {"ember eager": ember_step_fn(model, x, y)}
    failed = None
    try:
        compiled = compiled_step_fn(model, x, y)
        compiled()
        fns["ember compiled"] = compiled
    except Exception as error:  # reported in the table, not hidden
        failed = f"failed: {type(error).__name__}: {error}"[:90]
    if torch is not None:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        fns["torch eager"] = torch_step_fn(torch, t_net, torch.from_numpy(x_np), torch.from_numpy(y_np))
    try:
        medians, ratios = alternating_us(fns, repeats=REPEATS, min_time=0.5)
    finally:
        if torch is not None:
            torch.set_num_threads(threads)
    name = f"{kind.upper()} {LAYERS}x{HIDDEN}, seq {SEQ}, batch {BATCH}"
    rows = []
    for key in ("ember eager", "ember compiled", "torch eager"):
        if key not in medians:
            rows.append([f"{name}: {key}", failed or "-", "-"])
            continue
        ratio = ratios.get((key, "torch eager"))
        rows.append([f"{name}: {key}", fmt(medians[key]), "-" if ratio is None else f"{ratio:.2f}x"])
    print_table(
        "recurrent classifier training step (CE, Adam), median us per step; x/torch is the median ratio "
        "of alternating rounds (1 BLAS thread, torch 1 thread)",
        ["workload", "us/step", "x/torch"],
        rows,
    )


def profile(kind: str) -> None:
    x_np, y_np = data()
    device = Device.flex().autodiff()
    model = ember_twin(kind, device, None)
    step = ember_step_fn(model, Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device))
    step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        step()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)


def main() -> None:
    args = sys.argv[1:]
    kind = "gru" if "gru" in args else "lstm"
    if "--clock" in args:  # --clock cpu: process CPU time instead of wall-clock time
        use_clock(args[args.index("--clock") + 1])
    if "--profile" in args:
        profile(kind)
        return
    run(kind, try_import_torch())
    print(blas_line())


if __name__ == "__main__":
    main()
