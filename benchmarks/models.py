"""``ember.models`` against ``transformers`` on the same weights, one thread each.

    python benchmarks/models.py            # everything
    python benchmarks/models.py --quick    # fewer rounds, fewer new tokens
    python benchmarks/models.py --sections forward generate finetune
    python benchmarks/models.py --clock cpu  # CPU time: steadier on a loaded machine

Sections (each table's contestants run in alternating rounds; figures are medians):
- forward: latency of one forward pass per architecture (GPT-2, LLaMA, BERT, ViT, ResNet;
  batch 1, 128 tokens or one 224x224 image): ember eager, ember compiled
  (``ember.compile``), torch eager (``transformers``, ``no_grad``, eval).
- generate: tokens/s of greedy ``generate`` for GPT-2 and LLaMA of 10-30M parameters,
  batch 1 and 8, a 16-token prompt and 128 new tokens: ember (compiled decode step over
  the static KV cache), ``transformers``' ``generate`` (cache on), and a hand-written
  torch loop over ``transformers``' cache (the floor of a torch decoder).
- finetune: one training step (forward, backward, AdamW) of GPT-2, full and with LoRA
  (r 8 on the attention projections, base frozen; eager and through ``ember.compile``),
  ember against torch eager.

ember's BLAS runs on one thread (``EMBER_NUM_THREADS``, default 1), torch on one thread.
The models are random (no download): ``transformers`` builds them from configs and saves
them, and ember loads the saved directories with ``from_pretrained``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import alternating_us, fmt, print_table, use_clock
from ember import Device, Tensor
from ember.capture import compile as ember_compile
from ember.models import from_pretrained, generate

GPT2 = dict(vocab_size=16000, n_positions=512, n_embd=384, n_layer=6, n_head=6)
LLAMA = dict(
    vocab_size=16000,
    hidden_size=384,
    intermediate_size=1024,
    num_hidden_layers=6,
    num_attention_heads=6,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
BERT = dict(vocab_size=16000, hidden_size=384, num_hidden_layers=6, num_attention_heads=6, intermediate_size=1536)
VIT = dict(
    image_size=224,
    patch_size=16,
    hidden_size=384,
    num_hidden_layers=6,
    num_attention_heads=6,
    intermediate_size=1536,
    num_labels=10,
)
RESNET = dict(
    embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], layer_type="basic", num_labels=10
)

ARCHS = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", GPT2, "text"),
    "llama": ("LlamaForCausalLM", "LlamaConfig", LLAMA, "text"),
    "bert": ("BertForMaskedLM", "BertConfig", BERT, "text"),
    "vit": ("ViTForImageClassification", "ViTConfig", VIT, "image"),
    "resnet": ("ResNetForImageClassification", "ResNetConfig", RESNET, "image"),
}


def _note(clock) -> str:
    return ", CPU time" if clock is time.process_time else ""


def save(transformers, torch, root: Path, name: str) -> tuple[Path, object]:
    model_class, config_class, config, _ = ARCHS[name]
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config)).eval()
    directory = root / name
    model.save_pretrained(str(directory))
    return directory, model


def params(model) -> str:
    return f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M"


def forward_section(transformers, torch, root: Path, repeats: int, names: list[str], clock=time.perf_counter) -> None:
    rows = []
    rng = np.random.default_rng(0)
    for name in names:
        try:
            directory, reference = save(transformers, torch, root, name)
        except AttributeError as error:
            rows.append([name, "-", "-", "-", "-", "-", f"skipped: {error}"])
            continue
        kind = ARCHS[name][3]
        if kind == "text":
            array = rng.integers(0, 16000, size=(1, 128))
        else:
            array = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        model = from_pretrained(directory, device=Device.flex())
        x = Tensor.from_data(array)
        compiled = ember_compile(lambda m, t: m(t))
        tx = torch.as_tensor(array)

        def eager():
            model(x)  # flex runs eagerly: the logits exist when the call returns

        def traced():
            compiled(model, x)

        def theirs():
            with torch.no_grad():
                reference(tx)

        medians, ratios = alternating_us(
            {"eager": eager, "compiled": traced, "torch": theirs}, repeats=repeats, clock=clock
        )
        rows.append(
            [
                name,
                params(reference),
                fmt(medians["eager"] / 1e3),
                fmt(medians["compiled"] / 1e3),
                fmt(medians["torch"] / 1e3),
                f"{ratios[('eager', 'torch')]:.2f}x",
                f"{ratios[('compiled', 'torch')]:.2f}x",
            ]
        )
    print_table(
        f"forward, batch 1 (128 tokens / one 224x224 image), median ms (alternating rounds{_note(clock)})",
        ["model", "params", "ember eager", "ember compiled", "torch eager", "eager/torch", "compiled/torch"],
        rows,
    )


def torch_loop(torch, model, prompt, new_tokens: int):
    """Greedy decoding with transformers' cache, written by hand: the torch floor."""
    from transformers import DynamicCache

    with torch.no_grad():
        cache = DynamicCache()
        out = model(prompt, past_key_values=cache, use_cache=True)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens = [token]
        for _ in range(new_tokens - 1):
            out = model(token, past_key_values=out.past_key_values, use_cache=True)
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(token)
    return torch.cat(tokens, 1)


def generate_section(transformers, torch, root: Path, rounds: int, new_tokens: int, clock=time.perf_counter) -> None:
    rows = []
    rng = np.random.default_rng(0)
    for name in ("gpt2", "llama"):
        directory, reference = save(transformers, torch, root, name)
        model = from_pretrained(directory, device=Device.flex())
        for batch in (1, 8):
            prompt = rng.integers(0, 16000, size=(batch, 16))
            tp = torch.as_tensor(prompt)
            runs = {
                "ember": lambda: generate(model, prompt, new_tokens),
                "transformers": lambda: reference.generate(
                    tp,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    do_sample=False,
                    use_cache=True,
                    pad_token_id=0,
                ),
                "torch loop": lambda: torch_loop(torch, reference, tp, new_tokens),
            }
            for fn in runs.values():
                fn()  # warm-up: traces, allocations
            samples: dict[str, list[float]] = {k: [] for k in runs}
            for _ in range(rounds):
                for key, fn in runs.items():
                    start = clock()
                    fn()
                    samples[key].append(clock() - start)
            rate = {k: batch * new_tokens / statistics.median(v) for k, v in samples.items()}
            ratio = statistics.median(b / a for a, b in zip(samples["ember"], samples["transformers"]))
            loop_ratio = statistics.median(b / a for a, b in zip(samples["ember"], samples["torch loop"]))
            rows.append(
                [
                    name,
                    params(reference),
                    str(batch),
                    fmt(rate["ember"]),
                    fmt(rate["transformers"]),
                    fmt(rate["torch loop"]),
                    f"{ratio:.2f}x",
                    f"{loop_ratio:.2f}x",
                ]
            )
    print_table(
        f"greedy generate, 16-token prompt + {new_tokens} new tokens, tokens/s (median of {rounds} alternating "
        f"rounds{_note(clock)})",
        ["model", "params", "batch", "ember", "transformers", "torch loop", "ember/transformers", "ember/torch loop"],
        rows,
    )


def finetune_section(transformers, torch, root: Path, repeats: int, clock=time.perf_counter) -> None:
    from ember.nn import lora
    from ember.nn.loss import CrossEntropyLoss
    from ember.optim import AdamWConfig, GradientsParams

    directory, _ = save(transformers, torch, root, "gpt2")
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 16000, size=(4, 65))
    rows = []
    for mode in ("full", "lora", "lora compiled"):
        device = Device.flex().autodiff()
        model = from_pretrained(directory, device=device)
        if mode.startswith("lora"):
            model = lora.LoraConfig(r=8, alpha=16.0, targets=r"\.attn\.(qkv|query|key|value)$").init(model)
        optim, loss_fn = AdamWConfig(weight_decay=0.01, epsilon=1e-8).init(), CrossEntropyLoss()
        x = Tensor.from_data(tokens[:, :-1], device=device)
        y = Tensor.from_data(tokens[:, 1:].reshape(-1), device=device)
        state = {"model": model}

        def train_step(m, x, y, lr):
            loss = loss_fn.forward(m(x).reshape([-1, 16000]), y)
            return optim.step(lr, m, GradientsParams.from_grads(loss.backward(), m)), loss

        step = ember_compile(train_step) if mode.endswith("compiled") else train_step

        def ours():
            state["model"], loss = step(state["model"], x, y, 1e-4)
            loss.into_scalar()

        torch.manual_seed(0)
        reference = transformers.GPT2LMHeadModel.from_pretrained(str(directory)).train()
        if mode.startswith("lora"):
            reference = torch_lora(torch, reference)
        trainable = [p for p in reference.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.01)
        tx, ty = torch.as_tensor(tokens[:, :-1]), torch.as_tensor(tokens[:, 1:].reshape(-1))

        def theirs():
            logits = reference(tx).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 16000), ty)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()

        for _ in range(3):  # a compiled step traces, then compiles on its next calls: not timed
            ours()
        medians, ratios = alternating_us({"ember": ours, "torch": theirs}, repeats=repeats, clock=clock)
        rows.append(
            [mode, fmt(medians["ember"] / 1e3), fmt(medians["torch"] / 1e3), f"{ratios[('ember', 'torch')]:.2f}x"]
        )
    print_table(
        f"GPT-2 fine-tuning step (4 x 64 tokens, AdamW), median ms (alternating rounds{_note(clock)}; dropout as "
        "configured, 0.1)",
        ["mode", "ember", "torch", "ember/torch"],
        rows,
    )


def torch_lora(torch, model, r: int = 8, alpha: float = 16.0):
    """LoRA on GPT-2's fused c_attn in torch (PEFT's layout), base frozen."""

    class LoraConv1D(torch.nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base
            d_in, d_out = base.weight.shape
            self.lora_a = torch.nn.Parameter(torch.randn(d_in, r) / d_in**0.5)
            self.lora_b = torch.nn.Parameter(torch.zeros(r, d_out))

        def forward(self, x):
            return self.base(x) + (x @ self.lora_a @ self.lora_b) * (alpha / r)

    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.transformer.h:
        block.attn.c_attn = LoraConv1D(block.attn.c_attn)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sections", nargs="+", default=["forward", "generate", "finetune"])
    parser.add_argument("--models", nargs="+", default=list(ARCHS))
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="cpu: process CPU time (a loaded machine)"
    )
    args = parser.parse_args()
    use_clock(args.clock)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    repeats = 5 if args.quick else 9
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "forward" in args.sections:
            forward_section(transformers, torch, root, repeats, args.models, clock)
        if "generate" in args.sections:
            generate_section(transformers, torch, root, 3 if args.quick else 5, 32 if args.quick else 128, clock)
        if "finetune" in args.sections:
            finetune_section(transformers, torch, root, repeats, clock)


if __name__ == "__main__":
    main()
