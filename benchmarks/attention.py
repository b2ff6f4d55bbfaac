"""Scaled dot-product attention on flex: the fused kernel against the composite it
replaces (the same ops one by one), and PyTorch eager, forward and forward +
backward, in alternating rounds (medians, microseconds). The ``compiled`` section:
attention under ``ember.compile``, the flash form (``ember/backend/fusion/llvm/flash.py``)
(``EMBER_FLASH=1``) against the old steps that store the ``[L, S]`` weights (``EMBER_FLASH=0``) and torch's
``scaled_dot_product_attention``, with each plan's arena (its buffers' bytes).

    OPENBLAS_NUM_THREADS=1 python benchmarks/attention.py
    OPENBLAS_NUM_THREADS=1 python benchmarks/attention.py --sections compiled --clock cpu --seqs 512,1024
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ember
from benchmarks.common import alternating_us, fmt, median_us, paired_us, print_table, try_import_torch, use_clock
from ember import Device, Tensor
from ember.backend.flex.backend import FlexBackend
from ember.tensor.attention import scaled_dot_product_attention

SHAPES = [(8, 4, 64, 32), (4, 8, 128, 64), (1, 4, 256, 64)]


def _composite(fn):
    """Run ``fn`` with flex's fused attention switched off."""

    def run():
        saved = FlexBackend.attention
        FlexBackend.attention = lambda self, *args: NotImplemented
        try:
            return fn()
        finally:
            FlexBackend.attention = saved

    return run


def eager_section(torch) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for batch, heads, seq, dim in SHAPES:
        arrays = [rng.standard_normal((batch, heads, seq, dim)).astype(np.float32) for _ in range(3)]
        for label, device in (("forward", Device.flex()), ("forward+backward", Device.flex().autodiff())):
            tensors = [Tensor.from_data(a, device=device) for a in arrays]
            if device.is_autodiff():
                tensors = [t.require_grad() for t in tensors]

            def step(tensors=tensors, device=device):
                out = scaled_dot_product_attention(*tensors, is_causal=True)
                if device.is_autodiff():
                    out.sum().backward()
                else:
                    out.to_numpy()

            fused, composite, ratio = paired_us(step, _composite(step))
            theirs = None
            backward = device.is_autodiff()
            if torch is not None:
                tt = [torch.from_numpy(a).requires_grad_(backward) for a in arrays]

                def torch_step(tt=tt, backward=backward):
                    out = torch.nn.functional.scaled_dot_product_attention(*tt, is_causal=True)
                    if backward:
                        out.sum().backward()

                theirs = median_us(torch_step)
            rows.append(
                [
                    f"{batch}x{heads}x{seq}x{dim}",
                    label,
                    fmt(fused),
                    fmt(composite),
                    f"{1 / ratio:.2f}x",
                    fmt(theirs),
                    "-" if theirs is None else f"{fused / theirs:.2f}x",
                ]
            )
    print_table(
        "scaled_dot_product_attention on flex, causal (us per call; speedup = composite / fused)",
        ["shape [B,H,L,E]", "pass", "fused", "composite", "speedup", "torch", "fused/torch"],
        rows,
    )


def _with_flash(fn, on: bool):
    """``fn`` run with the flash form on or off (``EMBER_FLASH`` is read when a plan is made)."""

    def run(*args):
        saved = os.environ.get("EMBER_FLASH")
        os.environ["EMBER_FLASH"] = "1" if on else "0"
        try:
            return fn(*args)
        finally:
            if saved is None:
                del os.environ["EMBER_FLASH"]
            else:
                os.environ["EMBER_FLASH"] = saved

    return run


def _arena_mib(compiled) -> float:
    entry = next(iter(compiled._entries.values()))
    return entry.plan.variants[-1].memory.arena_bytes / 2**20


def compiled_section(torch, seqs: list[int], heads: int = 4, dim: int = 64, batch: int = 1) -> None:
    """Training (forward + backward) and inference (forward) under ``ember.compile``,
    causal, float32: the flash form, the old steps and torch eager."""
    rng = np.random.default_rng(0)
    rows = []
    for seq in seqs:
        arrays = [rng.standard_normal((batch, heads, seq, dim)).astype(np.float32) for _ in range(3)]
        for label, train in (("train", True), ("eval", False)):
            device = Device.flex().autodiff() if train else Device.flex()
            tensors = [Tensor.from_data(a, device=device) for a in arrays]
            if train:
                tensors = [t.require_grad() for t in tensors]

            def step(q, k, v, train=train):
                out = scaled_dot_product_attention(q, k, v, is_causal=True)
                if not train:
                    return out
                grads = out.sum().backward()
                return out, q.grad(grads), k.grad(grads), v.grad(grads)

            fns, arenas = {}, {}
            for name, on in (("flash", True), ("steps", False)):
                compiled = ember.compile(step)

                def call(compiled=compiled):
                    result = compiled(*tensors)
                    (result[0] if isinstance(result, tuple) else result).to_data()

                fns[name] = _with_flash(call, on)
                for _ in range(3):
                    fns[name]()
                arenas[name] = _arena_mib(compiled)
            if torch is not None:
                tt = [torch.from_numpy(a).requires_grad_(train) for a in arrays]

                def torch_step(tt=tt, train=train):
                    if not train:
                        with torch.no_grad():
                            return torch.nn.functional.scaled_dot_product_attention(*tt, is_causal=True)
                    out = torch.nn.functional.scaled_dot_product_attention(*tt, is_causal=True)
                    out.sum().backward()

                fns["torch"] = torch_step
            medians, ratios = alternating_us(fns, repeats=5)
            theirs = medians.get("torch")
            rows.append(
                [
                    f"{batch}x{heads}x{seq}x{dim}",
                    label,
                    fmt(medians["flash"]),
                    fmt(medians["steps"]),
                    f"{ratios[('flash', 'steps')]:.2f}x",
                    fmt(theirs),
                    "-" if theirs is None else f"{ratios[('flash', 'torch')]:.2f}x",
                    f"{arenas['flash']:.2f}",
                    f"{arenas['steps']:.2f}",
                ]
            )
    print_table(
        "causal attention under ember.compile (us per call; flash/steps and flash/torch: medians of per-round ratios;"
        " arena: the plan's buffers, MiB)",
        [
            "shape [B,H,L,E]",
            "pass",
            "flash",
            "steps",
            "flash/steps",
            "torch",
            "flash/torch",
            "arena flash",
            "arena steps",
        ],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="eager,compiled", help="eager, compiled (comma-separated)")
    parser.add_argument("--seqs", default="64,256,512,1024", help="sequence lengths of the compiled section")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    args = parser.parse_args()
    use_clock(args.clock)
    torch = try_import_torch()
    if torch is not None:
        torch.set_num_threads(1)
    sections = args.sections.split(",")
    if "eager" in sections:
        eager_section(torch)
    if "compiled" in sections:
        compiled_section(torch, [int(s) for s in args.seqs.split(",")])


if __name__ == "__main__":
    main()
