"""Text from a local Hugging Face checkpoint directory.

    python examples/generate.py DIR "Once upon a time" [--max-new-tokens 40] [--temperature 0.8]
        [--top-k 50] [--top-p 0.95] [--seed 0] [--dtype bfloat16]

DIR holds what ``save_pretrained`` writes (``config.json``, ``model.safetensors``) and the
tokenizer's ``tokenizer.json``, read with the ``tokenizers`` package (``pip install
ember[models]``). ember never downloads: fetch a model's files first. Tokens are printed
as they are generated, and the speed at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("prompt")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--repetition-penalty", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--dtype", default=None, help="float32 (default), float16 or bfloat16")
    args = parser.parse_args(argv)

    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("examples/generate.py reads tokenizer.json with the tokenizers package: pip install ember[models]")
    from ember.models import from_pretrained, generate, read_config

    tokenizer_file = args.directory / "tokenizer.json"
    if not tokenizer_file.is_file():
        sys.exit(f"{args.directory} has no tokenizer.json (save the tokenizer beside the model)")
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    model = from_pretrained(args.directory, dtype=args.dtype)
    config = read_config(args.directory)
    eos = config.get("eos_token_id")

    ids = tokenizer.encode(args.prompt).ids
    if not ids:
        sys.exit("the prompt encodes to no tokens")
    print(args.prompt, end="", flush=True)
    generated: list[int] = []
    printed = ""

    def stream(tokens: np.ndarray) -> None:
        nonlocal printed
        generated.append(int(tokens[0]))
        text = tokenizer.decode(generated)
        print(text[len(printed) :], end="", flush=True)
        printed = text

    start = time.perf_counter()
    generate(
        model,
        np.array([ids]),
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        eos_token_id=eos,
        seed=args.seed,
        streamer=stream,
    )
    elapsed = time.perf_counter() - start
    print(f"\n[{len(generated)} tokens in {elapsed:.2f} s, {len(generated) / max(elapsed, 1e-9):.1f} tokens/s]")


if __name__ == "__main__":
    main()
