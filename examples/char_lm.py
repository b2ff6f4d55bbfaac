"""A small character-level GPT, trained with a hand-written loop: the program a PyTorch
user writes first, in ember.

    python examples/char_lm.py [TEXT_FILE] [--steps 600] [--out runs/char_lm] [--temperature 0.8]

Without TEXT_FILE it trains on text that ships with Python: the docstrings of a fixed
list of standard-library modules (about 300,000 characters of English and code). The model:
token and position embeddings, 3 pre-norm transformer blocks (d_model 128, 4 heads,
exact GELU, dropout), a final layer norm and a linear head, over blocks of 64
characters in batches of 16. The training: AdamW with weight decay on the matrices
only (biases, norms and embeddings in a group without it), a linear warm-up into a
cosine decay, clipping by the global norm of the gradients, and a validation loss
every so often.

The state (model, optimizer, scheduler, random generator, step) is saved to
``--out`` every ``--save-every`` steps and at the end; run the script again to resume
where it stopped (``--stop-at`` stops early, as an interruption would), ``--fresh`` to
start over. The batches of step ``s`` are drawn from ``(seed, s)``, so a resumed run
trains on the same batches, with the same dropout masks, as an uninterrupted one, and
ends with the same weights. At the end it samples text at ``--temperature``. The
default 500 steps take about a minute on two idle cores.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from ember import Device, Module, Tensor
from ember.module import ParamGroup
from ember.nn import Dropout, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig
from ember.nn.loss import CrossEntropyLoss
from ember.nn.transformer import TransformerEncoder, TransformerEncoderConfig
from ember.optim import AdamWConfig, GradientClipping, GradientsParams
from ember.optim.lr_scheduler import CosineAnnealingLrSchedulerConfig, WarmupLrSchedulerConfig
from ember.train import TrainingState

BLOCK, BATCH, D_MODEL, HEADS, LAYERS = 64, 16, 128, 4, 3

#: Modules whose docstrings form the default corpus (present in every CPython 3.10+).
STDLIB_MODULES = (
    "argparse",
    "ast",
    "base64",
    "bisect",
    "calendar",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email.message",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http.client",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "logging",
    "os",
    "pathlib",
    "pickle",
    "pprint",
    "queue",
    "random",
    "re",
    "secrets",
    "shlex",
    "shutil",
    "socket",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "typing",
    "unittest",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "zipfile",
)


# ---------------------------------------------------------------------- data
def stdlib_text() -> str:
    """The docstrings of :data:`STDLIB_MODULES`, their classes and functions, in a fixed order."""
    parts = []
    for name in STDLIB_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # a Python built without the module
            continue
        for obj in [module] + [
            value for _, value in sorted(vars(module).items()) if inspect.isclass(value) or inspect.isfunction(value)
        ]:
            if getattr(obj, "__module__", name) not in (name, None) and obj is not module:
                continue  # documented where it is defined, not where it is imported
            doc = inspect.getdoc(obj)
            if doc and len(doc) > 80:
                parts.append(doc)
    return "\n\n".join(parts)


class Corpus:
    """The text as int64 character ids, split 90/10 into training and validation."""

    def __init__(self, text: str):
        chars = sorted(set(text))
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}
        ids = np.array([self.index[c] for c in text], dtype=np.int64)
        cut = int(0.9 * len(ids))
        self.train, self.valid = ids[:cut], ids[cut:]

    @property
    def vocab(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        return [self.index[c] for c in text if c in self.index]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def batch(self, split: str, rng: np.random.Generator, device: Device) -> tuple[Tensor, Tensor]:
        """``BATCH`` random windows: inputs ``[BATCH, BLOCK]`` and the next characters."""
        data = self.train if split == "train" else self.valid
        starts = rng.integers(0, len(data) - BLOCK - 1, BATCH)
        x = np.stack([data[s : s + BLOCK] for s in starts])
        y = np.stack([data[s + 1 : s + BLOCK + 1] for s in starts])
        return Tensor.from_data(x, device=device), Tensor.from_data(y, device=device)


# ---------------------------------------------------------------------- model
class Gpt(Module):
    """Embeddings, pre-norm transformer blocks with a causal mask, a final norm and a
    linear head to the vocabulary."""

    tok: Embedding
    pos: Embedding
    drop: Dropout
    blocks: TransformerEncoder
    norm: LayerNorm
    head: Linear

    @classmethod
    def new(cls, vocab: int, device: Device, dropout: float = 0.1) -> Gpt:
        return cls(
            tok=EmbeddingConfig(vocab, D_MODEL).init(device),
            pos=EmbeddingConfig(BLOCK, D_MODEL).init(device),
            drop=Dropout(dropout),
            blocks=TransformerEncoderConfig(D_MODEL, 4 * D_MODEL, HEADS, LAYERS, dropout=dropout, norm_first=True).init(
                device
            ),
            norm=LayerNormConfig(D_MODEL).init(device),
            head=LinearConfig(D_MODEL, vocab).init(device),
        )

    def forward(self, idx: Tensor) -> Tensor:
        """Logits ``[batch, time, vocab]`` for the ids ``[batch, time]``."""
        t = idx.dims()[1]
        x = self.tok(idx).add(self.pos(Tensor.arange(t, device=idx.device)))
        x = self.blocks(self.drop(x), causal=True)
        return self.head(self.norm(x))


def loss_of(model: Gpt, x: Tensor, y: Tensor, vocab: int) -> Tensor:
    logits = model(x)
    return CrossEntropyLoss()(logits.reshape([-1, vocab]), y.reshape([-1]))


def generate(model: Gpt, corpus: Corpus, prompt: str, chars: int, temperature: float, device: Device) -> str:
    """``chars`` characters after ``prompt``, each drawn from the softmax of the last
    logits divided by ``temperature`` (with the device's generator)."""
    model = model.valid()  # the model on the inner device: no graph, dropout off
    inner = device.inner()
    ids = corpus.encode(prompt) or [0]
    for _ in range(chars):
        context = Tensor.from_data(np.array([ids[-BLOCK:]], dtype=np.int64), device=inner)
        logits = model(context)[:, -1, :]  # [1, vocab]
        probs = logits.div_scalar(temperature).softmax(-1)
        ids.append(int(probs.multinomial(1).into_scalar()))
    return corpus.decode(ids)


# ---------------------------------------------------------------------- training
def build(corpus: Corpus, device: Device, steps: int, lr: float, warmup: int, dropout: float):
    model = Gpt.new(corpus.vocab, device, dropout)
    no_decay = ParamGroup.regex(r"(\.bias|\.gamma|\.beta)$") | ParamGroup.prefix("tok.") | ParamGroup.prefix("pos.")
    optim = (
        AdamWConfig(weight_decay=0.1, grad_clipping=GradientClipping.global_norm(1.0))
        .init()
        .with_group(no_decay, AdamWConfig(weight_decay=0.0))
    )
    cosine = CosineAnnealingLrSchedulerConfig(lr, max(steps - warmup - 1, 1), min_lr=lr / 10)
    scheduler = WarmupLrSchedulerConfig(cosine, warmup_iters=warmup).init()
    return model, optim, scheduler


def valid_loss(model: Gpt, corpus: Corpus, device: Device, batches: int = 4) -> float:
    rng = np.random.default_rng(12345)  # the same validation batches every time
    valid = model.valid()
    total = 0.0
    for _ in range(batches):
        x, y = corpus.batch("valid", rng, device.inner())
        total += loss_of(valid, x, y, corpus.vocab).into_scalar()
    return total / batches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("text", nargs="?", help="a UTF-8 text file (default: the standard library's docstrings)")
    parser.add_argument(
        "--steps", type=int, default=500, help="total training steps, the schedule's length (default 500)"
    )
    parser.add_argument(
        "--stop-at",
        type=int,
        default=None,
        help="stop (and save) after this step, as an interrupted run would; run again to resume",
    )
    parser.add_argument("--out", default="runs/char_lm", help="where the training state is saved")
    parser.add_argument("--fresh", action="store_true", help="delete a saved state and start over")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: 10%% of --steps)")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--save-every", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--sample-chars", type=int, default=300)
    parser.add_argument("--prompt", default="The ")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    text = Path(args.text).read_text(encoding="utf-8") if args.text else stdlib_text()
    corpus = Corpus(text)
    print(f"text: {len(text):,} characters ({args.text or 'standard-library docstrings'}), vocabulary {corpus.vocab}")
    if len(corpus.valid) <= BLOCK + 1:
        sys.exit(f"the text is too short: it needs more than {10 * (BLOCK + 2)} characters")

    device = Device.flex().autodiff()
    device.seed(args.seed)
    warmup = args.warmup if args.warmup is not None else max(args.steps // 10, 1)
    model, optim, scheduler = build(corpus, device, args.steps, args.lr, warmup, args.dropout)
    print(f"model: {model.num_params():,} parameters")
    out = Path(args.out) / "state"
    if args.fresh and out.exists():
        shutil.rmtree(out)
    step = 0
    if TrainingState.exists(out):
        state = TrainingState.load(out, model, optim, scheduler, device=device)
        model, step = state.model, state.step
        print(f"resumed from {out} at step {step}")

    started = time.perf_counter()
    first = step
    stop = args.steps if args.stop_at is None else min(args.stop_at, args.steps)
    while step < stop:
        rng = np.random.default_rng([args.seed, step])  # a resumed run draws the same batches
        x, y = corpus.batch("train", rng, device)
        loss = loss_of(model, x, y, corpus.vocab)
        value = loss.into_scalar()
        lr = scheduler.step()
        model = optim.step(lr, model, GradientsParams.from_grads(loss.backward(), model))
        step += 1
        if step % args.eval_every == 0 or step == args.steps:
            rate = (step - first) / (time.perf_counter() - started)
            print(
                f"step {step:5d}  loss {value:.4f}  valid {valid_loss(model, corpus, device):.4f}  "
                f"lr {lr:.2e}  {rate:.1f} steps/s"
            )
        if step % args.save_every == 0 or step == stop:
            TrainingState(model, optim, scheduler, step=step).save(out, device)
    if step > first:
        print(f"trained {step - first} steps in {time.perf_counter() - started:.1f} s; state saved to {out}")
    if step < args.steps:
        print(f"stopped at step {step} of {args.steps}; run again to resume")
    if args.sample_chars:
        print(f"\n--- sample (temperature {args.temperature}) ---")
        print(generate(model, corpus, args.prompt, args.sample_chars, args.temperature, device))


if __name__ == "__main__":
    main()
