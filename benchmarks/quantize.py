"""Quantized inference on flex, one thread (issue 29's benchmark).

    OPENBLAS_NUM_THREADS=1 python benchmarks/quantize.py [--quick] [--cpu-time] [--sections kernels conv digits bytes generate accuracy]

``--cpu-time`` times with the process's CPU time instead of the wall clock (on a machine
shared with other load, the scheduler stretches wall-clock times unevenly).

- kernels: a Linear [4096 -> 4096] at the decode shape (1 row) and a prefill shape
  (128 rows): ember float32 (numpy's sgemm), ember int8 / int4 block 32 weight-only,
  ember dynamic int8 (int8 x int8, VNNI where the CPU has it), and torch's
  ``torch.ao.quantization.quantize_dynamic`` on the same Linear as the peer, with torch's
  float Linear for reference; alternating rounds, medians, ratios per round; then
  dynamic int8 against torch's at more prefill shapes (512 rows, a 7B-class FFN's up
  and down projections [4096 -> 11008], [11008 -> 4096], GPT-2's FFN [768 -> 3072]);
- conv: a Conv2d 32 -> 64, 3x3, padding 1 on [8, 32, 28, 28]: ember float32 against
  the quantized layer (int8 / int4 block 32 weight-only, dynamic int8) and torch's float
  conv2d, alternating rounds, medians;
- digits: the digits CNN of ``examples/classify_digits.py`` (random weights), forward on
  a batch of 64, eager against ``ember.compile``, float32 / int8 / dynamic int8;
- bytes: a ~100M-parameter GPT-2-style decoder's parameter bytes, float32 / int8 / int4, with
  the default group (embeddings and the tied head in float) and with ``include_embeddings=True``;
- generate: greedy ``generate`` tokens/s of that decoder (random weights), float32 against
  int8 and int4 weight-only and int4 with dynamic int8 activations (``int4-dyn``:
  ``QuantScheme.int4(block=32, activations="dynamic")``, each row of activations rounded
  to int8, the nibbles multiplied in integers), batch 1, eager and compiled decode steps:
  decode (the new tokens after the prefill) and end to end, against float32 eager and
  against float32 with the same kind of step;
- accuracy: int8 / int4 logits against float32 on a small random GPT-2 (cosine, top-1).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import ember
from benchmarks.common import alternating_us, fmt, print_table, try_import_torch
from ember import Device, Tensor
from ember.backend.flex.quant_kernels import has_vnni
from ember.models import Gpt2Config, GPT2LMHeadModel, generate
from ember.module import Param
from ember.nn import Conv2dConfig, Linear
from ember.quantization import ParamGroup, QuantScheme
from ember.tensor.quant.conv import quantized_conv

SCHEMES = {
    "int8": QuantScheme.int8(),
    "int4": QuantScheme.int4(block=32),
    "int4-dyn": QuantScheme.int4(block=32, activations="dynamic"),
    "dyn-int8": QuantScheme.int8(activations="dynamic"),
}


def kernels_section(torch, repeats: int, clock=time.perf_counter) -> None:
    rng = np.random.default_rng(0)
    d = 4096
    w = (rng.standard_normal((d, d)) * 0.02).astype(np.float32)
    bias = np.zeros(d, np.float32)
    layer = Linear(weight=Param.from_tensor(Tensor.from_data(w)), bias=Param.from_tensor(Tensor.from_data(bias)))
    layers = {name: layer.quantize(s, ParamGroup.all()).valid() for name, s in SCHEMES.items()}
    layer = layer.valid()
    peer = peer_float = None
    if torch is not None:
        torch.set_num_threads(1)
        peer_float = torch.nn.Sequential(torch.nn.Linear(d, d))
        with torch.no_grad():
            peer_float[0].weight.copy_(torch.from_numpy(w.T.copy()))
            peer_float[0].bias.zero_()
        peer = torch.ao.quantization.quantize_dynamic(peer_float, {torch.nn.Linear}, dtype=torch.qint8)
    rows = []
    for label, m in (("decode", 1), ("prefill", 128)):
        x = (rng.standard_normal((m, d))).astype(np.float32)
        xt = Tensor.from_data(x)
        fns = {"float32": lambda: layer(xt)}
        fns.update({name: (lambda q=q: q(xt)) for name, q in layers.items()})
        if torch is not None:
            xp = torch.from_numpy(x)

            def torch_dynamic(xp=xp):
                with torch.no_grad():
                    return peer(xp)

            def torch_float(xp=xp):
                with torch.no_grad():
                    return peer_float(xp)

            fns["torch dyn-int8"] = torch_dynamic
            fns["torch float32"] = torch_float
        medians, ratios = alternating_us(fns, repeats=repeats, min_time=0.2, clock=clock)
        flops = 2.0 * m * d * d
        for name, us in medians.items():
            vs_float = ratios[("float32", name)] if name != "float32" else 1.0
            vs_torch = ratios[("torch dyn-int8", name)] if torch is not None and name != "torch dyn-int8" else None
            rows.append(
                [
                    f"{label} [{m},{d}]x[{d},{d}]",
                    name,
                    fmt(us, " us"),
                    fmt(flops / us / 1e3, ""),
                    f"{vs_float:.2f}x",
                    "-" if vs_torch is None else f"{vs_torch:.2f}x",
                ]
            )
    print_table(
        f"Linear {d}->{d}, 1 thread (VNNI: {has_vnni()}); speed = time of float32 (or torch dyn-int8) / time "
        f"(median of {repeats} alternating rounds{', CPU time' if clock is time.process_time else ''})",
        ["shape", "kernel", "time", "GFLOP/s", "vs ember float32", "vs torch dyn-int8"],
        rows,
    )


#: Prefill shapes ``(rows, d_input, d_output)`` beyond the 4096 x 4096 of the first table:
#: more rows, a 7B-class FFN's up and down projections, GPT-2's FFN.
PREFILL_SHAPES = ((512, 4096, 4096), (128, 4096, 11008), (128, 11008, 4096), (128, 768, 3072))


def prefill_section(torch, repeats: int, clock=time.perf_counter, quick: bool = False) -> None:
    """ember's dynamic int8 Linear against torch's ``quantize_dynamic`` at
    :data:`PREFILL_SHAPES` (random weights, std 0.02; inputs standard normal)."""
    if torch is None:
        print("prefill shapes: torch is not installed, no peer to compare with")
        return
    torch.set_num_threads(1)
    rng = np.random.default_rng(1)
    rows = []
    for m, d_in, d_out in PREFILL_SHAPES[:2] if quick else PREFILL_SHAPES:
        w = (rng.standard_normal((d_in, d_out)) * 0.02).astype(np.float32)
        bias = (rng.standard_normal(d_out) * 0.02).astype(np.float32)
        layer = Linear(weight=Param.from_tensor(Tensor.from_data(w)), bias=Param.from_tensor(Tensor.from_data(bias)))
        ours = layer.quantize(SCHEMES["dyn-int8"], ParamGroup.all()).valid()
        peer_float = torch.nn.Sequential(torch.nn.Linear(d_in, d_out))
        with torch.no_grad():
            peer_float[0].weight.copy_(torch.from_numpy(w.T.copy()))
            peer_float[0].bias.copy_(torch.from_numpy(bias))
        peer = torch.ao.quantization.quantize_dynamic(peer_float, {torch.nn.Linear}, dtype=torch.qint8)
        del layer, peer_float, w
        x = rng.standard_normal((m, d_in)).astype(np.float32)
        xt, xp = Tensor.from_data(x), torch.from_numpy(x)

        def torch_dynamic(peer=peer, xp=xp):
            with torch.no_grad():
                return peer(xp)

        fns = {"dyn-int8": lambda ours=ours, xt=xt: ours(xt), "torch dyn-int8": torch_dynamic}
        medians, ratios = alternating_us(fns, repeats=repeats, min_time=0.2, clock=clock)
        macs = m * d_in * d_out
        rows.append(
            [
                f"[{m},{d_in}]x[{d_in},{d_out}]",
                fmt(medians["dyn-int8"], " us"),
                fmt(macs / medians["dyn-int8"] / 1e3, ""),
                fmt(medians["torch dyn-int8"], " us"),
                fmt(macs / medians["torch dyn-int8"] / 1e3, ""),
                f"{ratios[('torch dyn-int8', 'dyn-int8')]:.2f}x",
            ]
        )
    print_table(
        f"dynamic int8 Linear at prefill shapes, 1 thread (VNNI: {has_vnni()}); speed = torch time / ember time "
        f"(median of {repeats} alternating rounds{', CPU time' if clock is time.process_time else ''})",
        ["shape", "ember dyn-int8", "GMAC/s", "torch dyn-int8", "GMAC/s", "vs torch dyn-int8"],
        rows,
    )


def conv_section(torch, repeats: int, clock=time.perf_counter) -> None:
    rng = np.random.default_rng(0)
    shape, c_out = (8, 32, 28, 28), 64
    layer = Conv2dConfig((shape[1], c_out), (3, 3), padding=1).init(Device.flex()).valid()
    quantized = {name: layer.quantized(s).valid() for name, s in SCHEMES.items()}
    x = rng.standard_normal(shape).astype(np.float32)
    xt = Tensor.from_data(x)
    fns = {"float32": lambda: layer(xt)}
    fns.update({name: (lambda q=q: q(xt)) for name, q in quantized.items()})
    # The int8 x int8 kernel itself (the layer's dynamic scheme rounds each sample to the
    # int8 grid and runs the weight-only product): each position's row quantized.
    dyn = quantized["dyn-int8"]
    dyn_bias = dyn.bias.val()
    fns["dyn-int8 kernel"] = lambda: quantized_conv(xt, dyn.weight, dyn.kernel_shape, dyn_bias, 1, 1)
    if torch is not None:
        torch.set_num_threads(1)
        xp, wp = torch.from_numpy(x), torch.from_numpy(layer.weight.val().to_numpy())

        def torch_float() -> object:
            with torch.no_grad():
                return torch.nn.functional.conv2d(xp, wp, None, 1, 1)

        fns["torch float32"] = torch_float
    medians, ratios = alternating_us(fns, repeats=repeats, min_time=0.2, clock=clock)
    rows = [
        [name, fmt(us, " us"), f"{ratios[('float32', name)] if name != 'float32' else 1.0:.2f}x"]
        for name, us in medians.items()
    ]
    print_table(
        f"Conv2d {shape[1]}->{c_out} 3x3 pad 1 on {list(shape)}, 1 thread; speed = time of float32 / time "
        f"(median of {repeats} alternating rounds{', CPU time' if clock is time.process_time else ''})",
        ["kernel", "time", "vs ember float32"],
        rows,
    )


def digits_section(repeats: int, clock=time.perf_counter) -> None:
    """The digits CNN (``examples/classify_digits.py``) forward on a batch of 64, eager
    against ``ember.compile``, float32 and quantized."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "examples" / "classify_digits.py"
    spec = importlib.util.spec_from_file_location("classify_digits", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    flex = Device.flex()
    flex.seed(0)
    model = example.DigitsCnn.new(flex)
    x = Tensor.from_data(np.random.default_rng(0).random((64, 1, 8, 8), dtype=np.float32))
    models = {
        "float32": model,
        "int8": model.quantize(SCHEMES["int8"]),
        "dyn-int8": model.quantize(SCHEMES["dyn-int8"]),
    }
    fns = {}
    for name, m in models.items():
        compiled = ember.compile(lambda m, images: m(images))
        fns[f"{name} eager"] = lambda m=m: m(x).to_numpy()
        fns[f"{name} compiled"] = lambda m=m, c=compiled: c(m, x).to_numpy()
    medians, ratios = alternating_us(fns, repeats=repeats, min_time=0.2, clock=clock)
    rows = []
    for name in models:
        eager, compiled = f"{name} eager", f"{name} compiled"
        rows.append(
            [name, fmt(medians[eager], " us"), fmt(medians[compiled], " us"), f"{ratios[(eager, compiled)]:.2f}x"]
        )
    print_table(
        f"Digits CNN forward [64, 1, 8, 8], 1 thread; speed = eager time / compiled time "
        f"(median of {repeats} alternating rounds{', CPU time' if clock is time.process_time else ''})",
        ["model", "eager", "compiled", "compiled speed"],
        rows,
    )


def decoder(device: Device, small: bool) -> GPT2LMHeadModel:
    """A GPT-2-style decoder: 12 layers of 768 (85M in the blocks) and an 8192-token
    vocabulary (6.3M, tied): ~92M parameters (``--quick``: 4 layers)."""
    device.seed(0)
    config = Gpt2Config(
        vocab_size=8192,
        n_positions=512,
        n_embd=768,
        n_layer=4 if small else 12,
        n_head=12,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel.from_config(config, device)


def model_bytes(model) -> int:
    return sum(p.val().to_numpy().nbytes for _, p in model.named_params())


def generate_sections(sections: list[str], quick: bool, rounds: int, clock=time.perf_counter) -> None:
    device = Device.flex()
    model = decoder(device, quick)
    count = model.num_params()
    start = time.perf_counter()
    variants = {"float32": model}
    for name in ("int8", "int4", "int4-dyn"):
        variants[name] = model.quantize(SCHEMES[name])
    quantize_s = time.perf_counter() - start
    # The opt-in: the embeddings too (the tied head then reads the packed table).
    for name in ("int8", "int4"):
        variants[f"{name}+emb"] = model.quantize(SCHEMES[name], include_embeddings=True)
    if "bytes" in sections:
        base = model_bytes(model)
        rows = [
            [name, f"{model_bytes(m) / 1e6:.1f} MB", f"{model_bytes(m) / base:.3f}x"] for name, m in variants.items()
        ]
        print_table(
            f"parameter bytes of a {count / 1e6:.0f}M-parameter decoder (int8/int4: the default group, embeddings "
            f"and tied head float32; +emb: include_embeddings=True; quantizing the default int8 and int4 took {quantize_s:.1f} s)",
            ["model", "bytes", "vs float32"],
            rows,
        )
        blocks = {
            name: sum(p.val().to_numpy().nbytes for path, p in m.named_params() if ".h." in f".{path}")
            for name, m in variants.items()
        }
        print("  the blocks alone: " + ", ".join(f"{n} {b / blocks['float32']:.3f}x" for n, b in blocks.items()))
    if "generate" not in sections:
        return
    new_tokens = 16 if quick else 32
    prompt = np.random.default_rng(0).integers(0, 8192, (1, 16))
    # Eager (compile=False) and compiled (the default: the decode step through
    # ember.compile; the warm-up's 2 tokens and the rounds' 1 + new_tokens share one
    # trace, the cache being a multiple of generation.CACHE_BLOCK slots).
    runs = {(name, mode): m for mode in ("eager", "compiled") for name, m in variants.items()}
    for (_, mode), m in runs.items():
        generate(m, prompt, 2, compile=mode == "compiled")  # warm: kernels compiled, caches built, traces
    # Each round times generate(1 token) (the prefill) and generate(1 + new_tokens); decode
    # tokens/s is new_tokens over the difference, end to end is over the whole call.
    decode: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    whole: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    for _ in range(rounds):
        for (name, mode), m in runs.items():
            compiled = mode == "compiled"
            start = clock()
            generate(m, prompt, 1, compile=compiled)
            prefill = clock() - start
            start = clock()
            generate(m, prompt, 1 + new_tokens, compile=compiled)
            total = clock() - start
            decode[name, mode].append(new_tokens / max(total - prefill, 1e-9))
            whole[name, mode].append((1 + new_tokens) / total)

    def ratio(samples: dict[tuple[str, str], list[float]], key: tuple[str, str], mode: str = "eager") -> str:
        return f"{np.median(np.array(samples[key]) / np.array(samples['float32', mode])):.2f}x"

    rows = [
        [
            name,
            mode,
            f"{np.median(decode[name, mode]):.1f}",
            ratio(decode, (name, mode)),
            ratio(decode, (name, mode), mode),
            f"{np.median(whole[name, mode]):.1f}",
            ratio(whole, (name, mode)),
        ]
        for name, mode in runs
    ]
    print_table(
        f"greedy generate, batch 1, 16-token prompt + {1 + new_tokens} new tokens, eager (compile=False) and "
        f"compiled; median of {rounds} alternating rounds{' (CPU time)' if clock is time.process_time else ''}",
        [
            "model",
            "decode step",
            "decode tokens/s",
            "vs float32 eager",
            "vs float32, same step",
            "end-to-end tokens/s",
            "vs float32 eager",
        ],
        rows,
    )


def accuracy_section() -> None:
    device = Device.flex()
    device.seed(0)
    config = Gpt2Config(
        vocab_size=256,
        n_positions=128,
        n_embd=128,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel.from_config(config, device)
    ids = Tensor.from_data(np.random.default_rng(0).integers(0, 256, (4, 128)))
    a = model(ids).to_numpy().reshape(-1, 256)
    rows = []
    for name in ("int8", "int4"):
        b = model.quantize(SCHEMES[name])(ids).to_numpy().reshape(-1, 256)
        cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        rows.append([name, f"{cosine.min():.5f}", f"{(a.argmax(1) == b.argmax(1)).mean() * 100:.1f}%"])
    print_table(
        "a random GPT-2 (2 x 128, std 0.02), 512 positions: logits against float32",
        ["scheme", "min cosine", "top-1 agreement"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", nargs="+", default=["kernels", "conv", "digits", "bytes", "generate", "accuracy"])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, a 4-layer decoder")
    parser.add_argument("--cpu-time", action="store_true", help="time CPU time (process_time), not the wall clock")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    torch = try_import_torch()
    if "kernels" in args.sections:
        kernels_section(torch, 3 if args.quick else 7, clock)
        prefill_section(torch, 3 if args.quick else 7, clock, args.quick)
    if "conv" in args.sections:
        conv_section(torch, 3 if args.quick else 7, clock)
    if "digits" in args.sections:
        digits_section(3 if args.quick else 7, clock)
    if "bytes" in args.sections or "generate" in args.sections:
        generate_sections(args.sections, args.quick, 2 if args.quick else 5, clock)
    if "accuracy" in args.sections:
        accuracy_section()


if __name__ == "__main__":
    main()
