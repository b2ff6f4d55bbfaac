"""LoRA fine-tuning of a local decoder model (a Hugging Face checkpoint directory).

    python examples/finetune_lora.py DIR [TEXT_FILE] [--steps 100] [--r 8] [--alpha 16]
        [--targets "\\.(qkv|query|value)$"] [--lr 1e-3] [--out runs/lora] [--merge]

DIR holds ``config.json``, ``model.safetensors`` and ``tokenizer.json`` (read with the
``tokenizers`` package: ``pip install ember[models]``). Low-rank adapters go on the Linear
layers whose ember path matches ``--targets`` (GPT-2's fused attention projection is
``...attn.qkv``, as its ``c_attn``; LLaMA's are ``...self_attn.query``/``.key``/``.value``/``.output``); the base stays frozen and only the
adapters train, with AdamW, on next-token prediction over blocks of TEXT_FILE (the
docstrings of a few standard-library modules when none is given). The adapters are saved
alone to ``--out/adapters.safetensors``; ``--merge`` folds them into the weights and
writes the whole model with ``save_pretrained`` to ``--out/merged`` (which ``transformers``
loads).
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from pathlib import Path

import numpy as np

from ember import Device, Tensor
from ember.nn import lora
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamWConfig, GradientsParams


def corpus(text_file: Path | None) -> str:
    if text_file is not None:
        return text_file.read_text()
    import argparse as a
    import json as j
    import pathlib as p

    return "\n".join(inspect.getdoc(m) or "" for m in (a, j, p))


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("text_file", type=Path, nargs="?")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--r", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=16.0)
    parser.add_argument("--targets", default=r"\.(qkv|query|value)$")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/lora"))
    parser.add_argument("--merge", action="store_true")
    args = parser.parse_args(argv)

    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit(
            "examples/finetune_lora.py reads tokenizer.json with the tokenizers package: pip install ember[models]"
        )
    from ember.models import from_pretrained

    device = Device.flex().autodiff()
    device.seed(args.seed)
    tokenizer = Tokenizer.from_file(str(args.directory / "tokenizer.json"))
    tokens = np.asarray(tokenizer.encode(corpus(args.text_file)).ids, np.int64)
    if tokens.size < args.block + 2:
        sys.exit(f"the text has {tokens.size} tokens; need more than a block of {args.block}")
    model = from_pretrained(args.directory, device=device)
    model = lora.LoraConfig(r=args.r, alpha=args.alpha, targets=args.targets).init(model)
    trainable = sum(p.num_elements() for _, p in lora.adapter_params(model))
    print(f"{type(model).__name__}: {model.num_params():,} parameters, {trainable:,} in adapters")

    optim, loss_fn = AdamWConfig(weight_decay=0.01).init(), CrossEntropyLoss()
    draws = np.random.default_rng(args.seed)
    losses = []
    start = time.perf_counter()
    for step in range(args.steps):
        starts = draws.integers(0, tokens.size - args.block - 1, size=args.batch)
        window = np.stack([tokens[s : s + args.block + 1] for s in starts])
        inputs = Tensor.from_data(window[:, :-1], device=device)
        targets = Tensor.from_data(window[:, 1:].reshape(-1), device=device)
        logits = model(inputs)
        loss = loss_fn.forward(logits.reshape([-1, logits.dims()[-1]]), targets)
        losses.append(loss.into_scalar())
        grads = GradientsParams.from_grads(loss.backward(), model)
        model = optim.step(args.lr, model, grads)
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.4f}")
    print(f"{args.steps} steps in {time.perf_counter() - start:.1f} s")

    args.out.mkdir(parents=True, exist_ok=True)
    lora.save_adapters(model, args.out / "adapters.safetensors")
    print(f"adapters saved to {args.out / 'adapters.safetensors'}")
    if args.merge:
        merged = lora.merge(model).valid()
        merged.save_pretrained(args.out / "merged")
        print(f"merged model saved to {args.out / 'merged'}")
    return losses


if __name__ == "__main__":
    main()
