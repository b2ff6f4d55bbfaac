"""Training-step time: ember/flex against PyTorch eager (and JAX ``jit`` when JAX is
installed), in one run. Median microseconds per step over several repeats.

    python benchmarks/train_step.py            # W1 to W4
    python benchmarks/train_step.py W4         # only the workloads named
    python benchmarks/train_step.py --clock cpu W4  # CPU time instead of wall-clock time
    python benchmarks/train_step.py amp        # W2 under autocast (bf16-mixed, 16-mixed) vs float32
    python benchmarks/train_step.py --torch-default-threads W2  # torch on its own thread pool

Run with OPENBLAS_NUM_THREADS=1: torch runs one thread too unless asked otherwise.

W1: the seed (MLP 4-16-1, MSE, Adam, 64 samples).
W2: MLP 784-256-10, cross-entropy, Adam, batch 128.
W3: the small CNN of the nn issue, cross-entropy, Adam, batch 64 of 1x28x28.
W4: a character-level GPT (3 pre-norm blocks, d_model 128, 4 heads, exact GELU,
    block 64, vocabulary 65), cross-entropy, Adam, batch 16: the training step and
    the eval forward (``model.valid()``; torch under ``no_grad``), from the same
    weights, with one BLAS thread on both sides; each eager and through
    ``ember.compile``, the compiled ones beside their GEMM floor (the step's own
    sgemm calls timed alone, ``benchmarks/gemm_floor.py``: through OpenBLAS, and
    through ember's own products where they apply, as compiled plans take them where
    OpenBLAS's kernels are narrower than the host). A row gives the compile:
    the wall and CPU time of the first three compiled steps (two traces and the
    plans), and how many plans loaded from the compiled-code cache (run with
    ``EMBER_COMPILE_CACHE=0`` or a new ``EMBER_CACHE_DIR`` for a cold compile).

Targets (issue "optim"): W1 at most 150 us per step and at most half of PyTorch
eager's time; W2 at most 1.0x PyTorch eager. Issue 14: W4 at most 1.2x PyTorch
eager per training step and 1.3x per eval forward, in the same run. Issue 27: W4
compiled at most 0.85x torch eager and 1.3x its GEMM floor per step, at most 0.7x
torch eager per eval forward; compile time of W4 under 3 s.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ember
from benchmarks.common import alternating_us, blas_line, fmt, print_table, try_import_torch, use_clock
from benchmarks.gemm_floor import gemm_calls, gemm_runner
from ember import Device, Module, Tensor
from ember.nn import Linear, LinearConfig, Relu
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams

STEPS = 200
REPEATS = 7


def time_steps(step, steps: int = STEPS, repeats: int = REPEATS, warmup: int = 20) -> float:
    """Median over ``repeats`` of the mean microseconds per step over ``steps`` steps."""
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        samples.append((time.perf_counter() - start) / steps * 1e6)
    return statistics.median(samples)


def time_pair(ember_step, other_step, steps: int = STEPS, repeats: int = REPEATS, warmup: int = 20):
    """Both step functions timed in alternating rounds (drifting machine load hits both
    alike): median us per step of each and the median per-round ratio."""
    for _ in range(warmup):
        ember_step()
        other_step()
    a, b = [], []
    for _ in range(repeats):
        for fn, samples in ((ember_step, a), (other_step, b)):
            start = time.perf_counter()
            for _ in range(steps):
                fn()
            samples.append((time.perf_counter() - start) / steps * 1e6)
    return statistics.median(a), statistics.median(b), statistics.median(x / y for x, y in zip(a, b))


class Mlp(Module):
    """docs/design.md's two-layer MLP (``l1 -> relu -> l2``), with the widths of each workload."""

    l1: Linear
    act: Relu
    l2: Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.act(self.l1(x)))


def mlp(sizes: list[int], device: Device) -> Mlp:
    d_in, d_hidden, d_out = sizes
    return Mlp(l1=LinearConfig(d_in, d_hidden).init(device), act=Relu(), l2=LinearConfig(d_hidden, d_out).init(device))


class Cnn(Module):
    """W3's small CNN: conv 1->16 3x3 pad 1, relu, max pool 2, conv 16->32 3x3 pad 1,
    relu, max pool 2, linear 1568->10 (inputs 1x28x28)."""

    conv1: Module
    conv2: Module
    pool: Module
    head: Linear

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(Relu()(self.conv1(x)))
        x = self.pool(Relu()(self.conv2(x)))
        return self.head(x.flatten(1))


def cnn(device: Device) -> Cnn:
    from ember.nn import Conv2dConfig, MaxPool2dConfig

    return Cnn(
        conv1=Conv2dConfig((1, 16), (3, 3), padding=(1, 1)).init(device),
        conv2=Conv2dConfig((16, 32), (3, 3), padding=(1, 1)).init(device),
        pool=MaxPool2dConfig((2, 2)).init(),
        head=LinearConfig(1568, 10).init(device),
    )


def ember_step_fn(model, x, y, loss_fn):
    optim = AdamConfig().init()
    state = {"model": model}

    def step():
        m = state["model"]
        loss = loss_fn(m(x), y)
        loss.into_scalar()
        grads = GradientsParams.from_grads(loss.backward(), m)
        state["model"] = optim.step(1e-3, m, grads)

    return step


def compiled_step_fn(model, x, y, loss_fn, executor=None):
    """``ember_step_fn``'s step through ``ember.compile`` (with ``executor``, default
    the shared one): the step function and the compiled function (whose trace
    ``benchmarks/gemm_floor.py`` reads)."""
    optim = AdamConfig().init()
    state = {"model": model}

    def train_step(m, x, y):
        loss = loss_fn(m(x), y)
        return optim.step(1e-3, m, GradientsParams.from_grads(loss.backward(), m)), loss

    compiled = ember.compile(train_step, executor=executor)

    def step():
        state["model"], loss = compiled(state["model"], x, y)
        loss.into_scalar()

    return step, compiled


def _forward_gemms(calls):
    """How many of a training step's products come before its backward: the trace
    records the forward first, and the first transposed operand opens the backward."""
    for i, call in enumerate(calls):
        if call[4] or call[5]:
            return i
    return len(calls)


def torch_step_fn(torch, net, x, y, loss_fn):
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-5)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.item()
        loss.backward()
        opt.step()

    return step


def jax_step_fn(sizes, x_np, y_np, kind):
    try:
        import jax
        import jax.numpy as jnp
        import optax
    except ImportError:
        return None
    key = jax.random.PRNGKey(0)
    params = []
    for a, b in itertools.pairwise(sizes):
        key, k1 = jax.random.split(key)
        params.append((jax.random.uniform(k1, (a, b), minval=-1 / a**0.5, maxval=1 / a**0.5), jnp.zeros(b)))

    def forward(params, x):
        for i, (w, b) in enumerate(params):
            x = x @ w + b
            if i < len(params) - 1:
                x = jax.nn.relu(x)
        return x

    def loss_fn(params, x, y):
        out = forward(params, x)
        if kind == "mse":
            return jnp.mean((out - y) ** 2)
        return optax.softmax_cross_entropy_with_integer_labels(out, y).mean()

    opt = optax.adam(1e-3, eps=1e-5)
    opt_state = opt.init(params)

    @jax.jit
    def update(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = opt.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    x, y = jnp.asarray(x_np), jnp.asarray(y_np)
    state = {"p": params, "o": opt_state}

    def step():
        state["p"], state["o"], loss = update(state["p"], state["o"], x, y)
        float(loss)

    return step


def workload_w1(torch, rows):
    rng = np.random.default_rng(0)
    x_np = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
    y_np = (x_np @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.5).astype(np.float32)
    device = Device.flex().autodiff()
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    mse = MseLoss()
    ember_step = ember_step_fn(mlp([4, 16, 1], device), x, y, lambda p, t: mse.forward(p, t, Reduction.MEAN))
    t_torch = t_jax = ratio = None
    if torch is not None:
        # Tiny tensors run single-threaded in torch anyway; its idle thread pool only adds
        # noise (milliseconds per step when another process holds the second core).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        torch_step = torch_step_fn(
            torch, net, torch.from_numpy(x_np), torch.from_numpy(y_np), torch.nn.functional.mse_loss
        )
        t_ember, t_torch, ratio = time_pair(ember_step, torch_step)
        torch.set_num_threads(threads)
    else:
        t_ember = time_steps(ember_step)
    jax_step = jax_step_fn([4, 16, 1], x_np, y_np, "mse")
    if jax_step is not None:
        t_jax = time_steps(jax_step)
    rows.append(row("W1 seed MLP 4-16-1, MSE, Adam, 64", t_ember, t_torch, t_jax, ratio))


def workload_w2(torch, rows):
    try:
        from ember.nn.loss import CrossEntropyLoss
    except ImportError:
        rows.append(["W2 MLP 784-256-10, CE, Adam, 128", "(needs CrossEntropyLoss)", "-", "-", "-", "-"])
        return
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((128, 784)).astype(np.float32)
    y_np = rng.integers(0, 10, 128)
    device = Device.flex().autodiff()
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    ce = CrossEntropyLoss()
    ember_step = ember_step_fn(mlp([784, 256, 10], device), x, y, lambda p, t: ce.forward(p, t))
    t_torch = t_jax = ratio = None
    if torch is not None:
        net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        torch_step = torch_step_fn(
            torch, net, torch.from_numpy(x_np), torch.from_numpy(y_np), torch.nn.functional.cross_entropy
        )
        t_ember, t_torch, ratio = time_pair(ember_step, torch_step, steps=30)
    else:
        t_ember = time_steps(ember_step, steps=30)
    jax_step = jax_step_fn([784, 256, 10], x_np, y_np, "ce")
    if jax_step is not None:
        t_jax = time_steps(jax_step, steps=50)
    rows.append(row("W2 MLP 784-256-10, CE, Adam, 128", t_ember, t_torch, t_jax, ratio))


def workload_w3(torch, rows):
    from ember.nn.loss import CrossEntropyLoss

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
    y_np = rng.integers(0, 10, 64)
    device = Device.flex().autodiff()
    model = cnn(device)
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    ce = CrossEntropyLoss()
    ember_step = ember_step_fn(model, x, y, lambda p, t: ce.forward(p, t))
    t_torch = ratio = None
    if torch is not None:
        net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(1568, 10),
        )
        torch_step = torch_step_fn(
            torch, net, torch.from_numpy(x_np), torch.from_numpy(y_np), torch.nn.functional.cross_entropy
        )
        t_ember, t_torch, ratio = time_pair(ember_step, torch_step, steps=10, repeats=5, warmup=3)
    else:
        t_ember = time_steps(ember_step, steps=10, repeats=5, warmup=3)
    rows.append(row("W3 small CNN, CE, Adam, 64", t_ember, t_torch, None, ratio))


def amp_table(torch) -> None:
    """W2's step under autocast against its float32 step, ember and torch (CPU autocast)
    each timed in alternating rounds against their own float32 step."""
    from ember.amp import GradScaler
    from ember.nn.loss import CrossEntropyLoss

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((128, 784)).astype(np.float32)
    y_np = rng.integers(0, 10, 128)
    device = Device.flex().autodiff()
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    ce = CrossEntropyLoss()

    def ember_fn(dtype):
        import ember

        optim = AdamConfig().init()
        scaler = GradScaler(enabled=dtype == "float16")
        state = {"model": mlp([784, 256, 10], device)}

        def step():
            m = state["model"]
            if dtype is None:
                loss = ce.forward(m(x), y)
            else:
                with ember.autocast(device, dtype):
                    loss = ce.forward(m(x), y)
            loss.into_scalar()
            grads = GradientsParams.from_grads(scaler.scale(loss).backward(), m)
            state["model"] = scaler.step(optim, 1e-3, m, grads)
            scaler.update()

        return step

    def torch_fn(dtype):
        net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        opt = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-5)
        scaler = torch.amp.GradScaler("cpu", enabled=dtype == "float16")
        tx, ty = torch.from_numpy(x_np), torch.from_numpy(y_np)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=getattr(torch, dtype or "float32"), enabled=dtype is not None):
                loss = torch.nn.functional.cross_entropy(net(tx), ty)
            loss.item()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        return step

    rows = []
    for name, dtype in (("bf16-mixed", "bfloat16"), ("16-mixed (GradScaler)", "float16")):
        t_amp, t_f32, ratio = time_pair(ember_fn(dtype), ember_fn(None), steps=30)
        cells = [f"W2 {name}", fmt(t_f32), fmt(t_amp), f"{ratio:.2f}x"]
        if torch is not None:
            tt_amp, tt_f32, t_ratio = time_pair(torch_fn(dtype), torch_fn(None), steps=30)
            cells += [fmt(tt_f32), fmt(tt_amp), f"{t_ratio:.2f}x"]
        else:
            cells += ["-", "-", "-"]
        rows.append(cells)
    print_table(
        "W2 MLP 784-256-10, CE, Adam, batch 128 under autocast: median us per step; amp/f32 is the median "
        "ratio of alternating rounds against the same framework's float32 step (torch: CPU autocast)",
        ["workload", "ember f32", "ember amp", "amp/f32", "torch f32", "torch amp", "amp/f32"],
        rows,
    )


def workload_w4(torch, rows):
    from benchmarks.gpt import ember_gpt, torch_twin
    from ember.backend.fusion.llvm import LLVMExecutor
    from ember.nn.loss import CrossEntropyLoss

    batch, block, vocab = 16, 64, 65
    rng = np.random.default_rng(0)
    x_np = rng.integers(0, vocab, (batch, block))
    y_np = rng.integers(0, vocab, (batch, block))
    device = Device.flex().autodiff()
    device.seed(0)
    model = ember_gpt(device, vocab=vocab, block=block)
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    x_eval = Tensor.from_data(x_np, device=device.inner())
    ce = CrossEntropyLoss()

    def w4_loss(p, t):
        return ce.forward(p.reshape([-1, vocab]), t.reshape([-1]))

    ember_step = ember_step_fn(model, x, y, w4_loss)
    executor = LLVMExecutor()  # its own: its plans are this workload's
    compiled_step, compiled = compiled_step_fn(model, x, y, w4_loss, executor)
    state = {}

    def ember_eval():
        if "valid" not in state:
            state["valid"] = model.valid()
        state["valid"](x_eval).to_data()

    compiled_forward = ember.compile(lambda m, inputs: m(inputs))

    def compiled_eval():
        if "valid" not in state:
            state["valid"] = model.valid()
        compiled_forward(state["valid"], x_eval).to_data()

    # The compile: Adam's first step (no moments yet) is traced and replayed, the
    # steady step traced and replayed, then planned and compiled on its second run.
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(3):
        compiled_step()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    variants = [v for plan in executor._plans.values() for v in plan.variants]
    loaded = sum(v.optimize_s == 0.0 for v in variants)
    compile_row = [
        f"W4 compile: first 3 compiled steps ({loaded} of {len(variants)} plans from the cache)",
        f"{wall:.2f} s wall, {cpu:.2f} s CPU",
        "-",
        "-",
        "-",
        "-",
    ]
    calls = gemm_calls(compiled)
    eval_calls = calls[: _forward_gemms(calls)]

    if torch is None:
        rows.append(
            row("W4 GPT 3x128, block 64, Adam, 16", time_steps(ember_step, steps=5, repeats=5, warmup=2), None, None)
        )
        rows.append(compile_row)
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        net = torch_twin(torch, model)
        tx, ty = torch.from_numpy(x_np), torch.from_numpy(y_np)

        def loss_fn(logits, targets):
            return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

        torch_step = torch_step_fn(torch, net, tx, ty, loss_fn)

        def torch_eval():
            with torch.no_grad():
                net(tx).numpy()

        medians, ratios = alternating_us(
            {
                "ember step": ember_step,
                "compiled step": compiled_step,
                "torch step": torch_step,
                "ember eval": ember_eval,
                "compiled eval": compiled_eval,
                "torch eval": torch_eval,
                "step floor": gemm_runner(calls),
                "eval floor": gemm_runner(eval_calls),
                "step floor, ember": gemm_runner(calls, "ember"),
                "eval floor, ember": gemm_runner(eval_calls, "ember"),
            },
            repeats=REPEATS,
            min_time=0.3,
        )
    finally:
        torch.set_num_threads(threads)
    for name, key, floor in (
        ("W4 GPT 3x128, block 64, Adam, 16: step", "ember step", None),
        ("W4 step, compiled", "compiled step", "step floor"),
        ("W4 GPT: eval forward", "ember eval", None),
        ("W4 eval forward, compiled", "compiled eval", "eval floor"),
    ):
        torch_key = "torch step" if "step" in key else "torch eval"
        rows.append(row(name, medians[key], medians[torch_key], None, ratios[(key, torch_key)]))
        if floor is not None:
            count = len(calls if key == "compiled step" else eval_calls)
            for label, which in (
                (f"{count} sgemm, OpenBLAS", floor),
                ("the same, ember's products", f"{floor}, ember"),
            ):
                rows.append(
                    [
                        f"  its GEMM floor ({label})",
                        fmt(medians[which]),
                        "-",
                        f"{ratios[(key, which)]:.2f}x of floor",
                        "-",
                        "-",
                    ]
                )
    rows.append(compile_row)


def row(name, t_ember, t_torch, t_jax, ratio=None):
    return [
        name,
        fmt(t_ember),
        fmt(t_torch),
        "-" if ratio is None else f"{ratio:.2f}x",
        fmt(t_jax),
        "-" if t_jax is None else f"{t_ember / t_jax:.2f}x",
    ]


def main() -> None:
    torch = try_import_torch()
    argv = sys.argv[1:]
    if "--clock" in argv:  # --clock cpu: process CPU time instead of wall-clock time
        at = argv.index("--clock")
        use_clock(argv[at + 1])
        del argv[at : at + 2]
    if argv == ["amp"]:
        amp_table(torch)
        return
    if torch is not None and "--torch-default-threads" not in argv:
        # Equal resources: ember runs one BLAS thread (OPENBLAS_NUM_THREADS=1, as the
        # command above sets). torch's default pool on a shared 2-core machine made its W3
        # step 95-450 ms against about 12 ms on one thread.
        torch.set_num_threads(1)
    argv = [a for a in argv if a != "--torch-default-threads"]
    rows: list[list[str]] = []
    chosen = {name.upper() for name in argv}
    for workload in (workload_w1, workload_w2, workload_w3, workload_w4):
        if chosen and workload.__name__.split("_")[1].upper() not in chosen:
            continue
        try:
            workload(torch, rows)
        except Exception as error:
            rows.append([workload.__name__, f"failed: {type(error).__name__}: {error}"[:70], "-", "-", "-", "-"])
    print_table(
        "training step, median us per step; ember/torch is the median ratio of alternating rounds "
        f"(torch eager: {torch.get_num_threads() if torch is not None else '-'} thread(s); jax.jit when installed)",
        ["workload", "ember", "torch", "ember/torch", "jax", "ember/jax"],
        rows,
    )
    print(blas_line())


if __name__ == "__main__":
    main()
