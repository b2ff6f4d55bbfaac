"""Checksums for the tensor bytes of a record: throughput of the candidates, and the
cost of ember's choice (CRC-32) relative to reading the same bytes from disk.

    python benchmarks/record_checksum.py [megabytes]

The checksum detects accidental damage (bit rot, truncation, a partial copy); it is
not a signature (anyone who can edit the file can rewrite the checksum too). So a
CRC is enough, and the fastest candidate wins if it is not much slower to verify than
the read itself. Each candidate is timed in alternating rounds against a plain
``bytes`` copy of the same buffer (medians over rounds).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import fmt, paired_us, print_table


def main() -> None:
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    data = np.random.default_rng(0).standard_normal(megabytes * (1 << 18)).astype(np.float32)
    view = memoryview(data.view(np.uint8))
    candidates = {
        "zlib.crc32 (ember)": lambda: zlib.crc32(view),
        "zlib.adler32": lambda: zlib.adler32(view),
        "hashlib.blake2b": lambda: hashlib.blake2b(view, digest_size=16).digest(),
        "hashlib.sha256": lambda: hashlib.sha256(view).digest(),
        "hashlib.md5": lambda: hashlib.md5(view, usedforsecurity=False).digest(),
    }
    with tempfile.NamedTemporaryFile(delete=False) as handle:
        handle.write(view)
        path = handle.name

    def read_file() -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def copy() -> bytes:
        return bytes(view)

    rows = []
    try:
        for name, fn in list(candidates.items()) + [("read the file (page cache)", read_file)]:
            us, _, ratio = paired_us(fn, copy, repeats=7, min_time=0.2)
            rows.append([name, fmt(megabytes / (us / 1e6), " MB/s"), fmt(ratio, "x")])
    finally:
        os.unlink(path)
    print_table(
        f"Checksums of {megabytes} MB (throughput; time relative to a memory copy)",
        ["checksum", "throughput", "vs copy"],
        rows,
    )


if __name__ == "__main__":
    main()
