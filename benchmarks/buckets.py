"""Shape buckets: a forward whose batch varies, eager, compiled per shape and bucketed.

    OPENBLAS_NUM_THREADS=1 python benchmarks/buckets.py --rounds 3

A GPT-2 (default 2 layers of width 128, 16 tokens) runs a stream of 48 batches of random
sizes 1-32 five ways: eager, ``ember.compile`` (one trace per batch size, the default 8
kept, least recently used dropped, or 64 kept) and
``ember.compile(..., buckets={"ids": 0})`` with powers of two or multiples of 8. Each is timed
cold (a fresh compiled function: its traces and compiles inside the stream) and warm (the
same stream again). CPU seconds (``time.process_time``), medians over alternating rounds;
the traces each compiled function made are printed beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ember
from ember import Device, Tensor
from ember.models import gpt2


def forward(model, ids):
    return model(ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=48)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    device = Device.flex()
    config = gpt2.Gpt2Config(vocab_size=512, n_positions=64, n_embd=args.width, n_layer=args.layers, n_head=4)
    model = gpt2.GPT2LMHeadModel.from_config(config, device)
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 33, args.calls)
    stream = [Tensor.from_data(rng.integers(0, 512, (int(b), args.tokens)), device=device) for b in sizes]

    def run(fn) -> float:
        start = time.process_time()
        for ids in stream:
            fn(model, ids).to_numpy()
        return time.process_time() - start

    ways = {
        "eager": lambda: forward,
        "per shape, 8 kept": lambda: ember.compile(forward, recompile_warning=False),
        "per shape, 64 kept": lambda: ember.compile(forward, max_traces=64),
        "buckets, powers of 2": lambda: ember.compile(forward, buckets={"ids": 0}),
        "buckets of 8": lambda: ember.compile(forward, buckets={"ids": 0}, bucket_sizes=[8, 16, 24, 32]),
    }
    cold: dict[str, list[float]] = {k: [] for k in ways}
    warm: dict[str, list[float]] = {k: [] for k in ways}
    traces: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, make in ways.items():
            fn = make()
            cold[name].append(run(fn))
            warm[name].append(run(fn))
            traces[name] = getattr(fn, "stats", {}).get("traces", 0)
    print(
        f"{args.calls} calls, batch 1-32 x {args.tokens} tokens, GPT-2 {args.layers}x{args.width}; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(f"{'way':<22} {'cold, s':>9} {'warm, ms/call':>14} {'traces':>7}")
    for name in ways:
        per_call = statistics.median(warm[name]) / args.calls * 1e3
        print(f"{name:<22} {statistics.median(cold[name]):>9.2f} {per_call:>14.2f} {traces[name]:>7}")


if __name__ == "__main__":
    main()
