"""The message of a key mismatch between a foreign checkpoint and a module: the
unmatched keys of both sides and, when the pairing is obvious, the ``remap`` rules
that fix it."""

from __future__ import annotations

import re

import numpy as np

from ember.module.module import Module

__all__ = ["listing", "mismatch_message", "suggest_remap"]


def listing(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


def _split(key: str) -> tuple[str, str]:
    head, _, leaf = key.rpartition(".")
    return head, leaf


def _torch_leaves(module: Module) -> dict[str, str]:
    """``{ember key: PyTorch's leaf name}`` for fields that PyTorch names differently."""
    out: dict[str, str] = {}
    for path, layer in module.modules():
        prefix = f"{path}." if path else ""
        for theirs, ours in type(layer).pytorch_names.items():
            out[prefix + ours] = theirs
    return out


def _common_tail(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


def suggest_remap(module: Module, missing: list[str], unexpected: list[str]) -> list[tuple[str, str]]:
    """Regex rules that rename the file's unmatched keys onto the module's, when the
    pairing is obvious: layers (key prefixes) with the same parameter names, paired in
    order. Empty when no such pairing exists."""
    leaves = _torch_leaves(module)

    def groups(keys: list[str], ember_side: bool) -> dict[str, frozenset[str]]:
        out: dict[str, set[str]] = {}
        for key in keys:
            head, leaf = _split(key)
            out.setdefault(head, set()).add(leaves.get(key, leaf) if ember_side else leaf)
        return {head: frozenset(leafs) for head, leafs in out.items()}

    theirs, ours = groups(unexpected, False), groups(missing, True)
    by_signature: dict[frozenset[str], tuple[list[str], list[str]]] = {}
    for head, signature in theirs.items():
        by_signature.setdefault(signature, ([], []))[0].append(head)
    for head, signature in ours.items():
        by_signature.setdefault(signature, ([], []))[1].append(head)
    pairs = [
        pair
        for heads_a, heads_b in by_signature.values()
        if len(heads_a) == len(heads_b)
        for pair in _pair_heads(heads_a, heads_b)
    ]
    if not pairs:
        return []
    order = {head: i for i, head in enumerate(theirs)}
    pairs.sort(key=lambda pair: order[pair[0]])
    # One rule for all pairs when they differ only by a common leading part.
    cuts = set()
    for a, b in pairs:
        pa, pb = a.split(".") if a else [], b.split(".") if b else []
        n = _common_tail(pa, pb)
        cuts.add((".".join(pa[: len(pa) - n]), ".".join(pb[: len(pb) - n])))
    if len(cuts) == 1:
        a, b = cuts.pop()
        if a or b:
            return [(f"^{re.escape(a)}\\." if a else "^", f"{b}." if b else "")]
    rules = []
    for a, b in pairs:
        if a == b:
            continue
        pattern = f"^{re.escape(a)}\\." if a else "^"
        rules.append((pattern, f"{b}." if b else ""))
    return rules


def _pair_heads(theirs: list[str], ours: list[str]) -> list[tuple[str, str]]:
    """Layers of the same signature paired by the longest common tail of their paths
    (``net.attn.query`` with ``attn.query``), the rest in order."""
    pairs: list[tuple[str, str]] = []
    left_a, left_b = list(theirs), list(ours)
    for a in theirs:
        tails = [(_common_tail(a.split("."), b.split(".")), b) for b in left_b]
        best = max((n for n, _ in tails), default=0)
        winners = [b for n, b in tails if n == best]
        if best > 0 and len(winners) == 1:
            pairs.append((a, winners[0]))
            left_a.remove(a)
            left_b.remove(winners[0])
    return pairs + list(zip(left_a, left_b))


def _raw(pattern: str) -> str:
    """A regex as a raw string literal a user can paste."""
    return f'r"{pattern}"' if '"' not in pattern and not pattern.endswith("\\") else repr(pattern)


def _as_pytorch(module: Module, keys: list[str]) -> list[str]:
    """``keys`` as PyTorch names them where a layer joins or renames its tensors
    (``Module.export_pytorch_keys``: an ``Lstm``'s gates are one ``weight_ih_l0``)."""
    named = {key: np.zeros(0) for key in keys}  # only the names matter
    for path, layer in reversed(list(module.modules())):
        if type(layer).export_pytorch_keys is not Module.export_pytorch_keys:
            named = layer.export_pytorch_keys(f"{path}." if path else "", named)
    return list(named)


def mismatch_message(module: Module, path: object, missing: list[str], unexpected: list[str], op: str) -> str:
    name = type(module).__name__
    lines = [f"ember: {op}: the keys of {path} do not match {name}."]
    if missing:
        lines.append(f"  in {name}, not in the file: {listing(missing)}")
        theirs = _as_pytorch(module, missing)
        if sorted(theirs) != sorted(missing):
            lines.append(f"  (in PyTorch's names: {listing(theirs)})")
    if unexpected:
        lines.append(f"  in the file, not in {name}: {listing(unexpected)}")
    rules = suggest_remap(module, missing, unexpected) if missing and unexpected else []
    if rules:
        shown = ", ".join(f"({_raw(p)}, {r!r})" for p, r in rules[:8])
        lines.append(f"  The names differ: rename the file's keys with {_remap_arg(op)}=[{shown}]")
    elif missing and unexpected:
        lines.append(
            f"  If the names differ, rename the file's keys with {_remap_arg(op)}=[(pattern, replacement), ...] "
            "(regexes applied in order)"
        )
    if unexpected and not missing:
        lines.append(
            "  Drop the extra keys with skip=[pattern, ...] (regexes)"
            + (", or pick a sub-dict with top_level_key=..." if op == "load_pytorch" else "")
        )
    lines.append("  (strict=False loads only the keys that match and leaves the rest of the module as it is)")
    return "\n".join(lines)


def _remap_arg(op: str) -> str:
    return "key_remap" if op == "load_pytorch" else "remap"
