"""Import of PyTorch ``state_dict`` files (``.pt``/``.pth``) without PyTorch.

The file is read by :mod:`ember.module.torch_pickle`, which executes nothing from it.
Keys are then remapped with the user's regex rules, and each layer adapts its own
entries: it declares PyTorch's names for its fields (``Module.pytorch_names``: the
norm layers' ``weight``/``bias`` are ember's ``gamma``/``beta``) and PyTorch's layout
(``Module.adapt_pytorch``: ``Linear`` transposes its ``[out, in]`` weight).

>>> model = Mlp.new(device).load_pytorch("mlp.pt", key_remap=[(r"^net\\.", "")])  # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import numpy as np

from ember.errors import RecordError
from ember.module.module import Module
from ember.module.torch_pickle import read_pytorch

__all__ = ["DEFAULT_SKIP", "load_pytorch", "read_pytorch", "remap_keys"]

#: Keys always dropped: BatchNorm's step counter, which ember's BatchNorm does not keep.
DEFAULT_SKIP = (r"(^|\.)num_batches_tracked$",)


def remap_keys(arrays: dict[str, np.ndarray], rules: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
    """Apply regex ``(pattern, replacement)`` rules in order to every key."""
    try:
        compiled = [(re.compile(p), r) for p, r in rules]
    except (re.error, TypeError, ValueError) as error:
        raise RecordError(
            f"ember: load_pytorch: key_remap must be (pattern, replacement) regex pairs: {error}"
        ) from None
    out: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        for pattern, replacement in compiled:
            key = pattern.sub(replacement, key)
        if key in out:
            raise RecordError(f"ember: load_pytorch: two keys map to {key!r} after remapping")
        out[key] = value
    return out


def adapt_to_module(
    module: Module, arrays: dict[str, np.ndarray], *, names: bool = True, layouts: bool = True
) -> dict[str, np.ndarray]:
    """``arrays`` with each layer's PyTorch names and layouts turned into ember's (see
    ``Module.pytorch_names`` and ``Module.adapt_pytorch``)."""
    out = dict(arrays)
    for path, layer in module.modules():
        cls = type(layer)
        prefix = f"{path}." if path else ""
        if names:
            for theirs, ours in cls.pytorch_names.items():
                if prefix + theirs in out and prefix + ours not in out:
                    out[prefix + ours] = out.pop(prefix + theirs)
        if layouts and cls.adapt_pytorch is not Module.adapt_pytorch:
            for field in cls._fields:
                if prefix + field in out:
                    out[prefix + field] = layer.adapt_pytorch(field, out[prefix + field])
    return out


def load_pytorch(
    module: Module,
    path: str | os.PathLike,
    *,
    key_remap: Sequence[tuple[str, str]] = (),
    top_level_key: str | None = None,
    strict: bool = True,
    transpose_linear: bool = True,
    skip: Sequence[str] = (),
    adapt_names: bool = True,
) -> Module:
    """A copy of ``module`` with the weights of a PyTorch state dict file.

    ``key_remap`` renames keys (regex rules, applied in order); keys matching a
    ``skip`` pattern (after remapping) are dropped, in addition to
    :data:`DEFAULT_SKIP` (BatchNorm's counter). Then each layer adapts its entries:
    PyTorch's names for its fields (``adapt_names``: the norm layers' ``weight``/``bias``
    become ``gamma``/``beta``) and its layout (``transpose_linear``: ``Linear`` weights are
    transposed from PyTorch's ``[out, in]``). ``strict=True`` requires the file and the
    module to have the same keys; ``strict=False`` loads the keys both have.
    """
    from ember.module.record import load_arrays, module_entries

    arrays = remap_keys(read_pytorch(path, top_level_key), key_remap)
    try:
        skips = [re.compile(s) for s in (*DEFAULT_SKIP, *skip)]
    except (re.error, TypeError) as error:
        raise RecordError(f"ember: load_pytorch: skip must be regex patterns: {error}") from None
    arrays = {k: v for k, v in arrays.items() if not any(s.search(k) for s in skips)}
    arrays = adapt_to_module(module, arrays, names=adapt_names, layouts=transpose_linear)
    if strict:
        ours = module_entries(module)
        missing = [k for k in ours if k not in arrays]
        unexpected = [k for k in arrays if k not in ours]
        if missing or unexpected:
            raise RecordError(_mismatch_message(module, path, missing, unexpected))
    return load_arrays(module, arrays, source=str(path), strict=strict)


# ---------------------------------------------------------------------- the mismatch message
def _listing(keys: list[str], limit: int = 12) -> str:
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
        (a, b)
        for heads_a, heads_b in by_signature.values()
        if len(heads_a) == len(heads_b)
        for a, b in zip(heads_a, heads_b)
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


def _raw(pattern: str) -> str:
    """A regex as a raw string literal a user can paste."""
    return f'r"{pattern}"' if '"' not in pattern and not pattern.endswith("\\") else repr(pattern)


def _mismatch_message(module: Module, path: object, missing: list[str], unexpected: list[str]) -> str:
    name = type(module).__name__
    lines = [f"ember: load_pytorch: the keys of {path} do not match {name}."]
    if missing:
        lines.append(f"  in {name}, not in the file: {_listing(missing)}")
    if unexpected:
        lines.append(f"  in the file, not in {name}: {_listing(unexpected)}")
    rules = suggest_remap(module, missing, unexpected) if missing and unexpected else []
    if rules:
        shown = ", ".join(f"({_raw(p)}, {r!r})" for p, r in rules[:8])
        lines.append(f"  The names differ: rename the file's keys with key_remap=[{shown}]")
    elif missing and unexpected:
        lines.append(
            "  If the names differ, rename the file's keys with key_remap=[(pattern, replacement), ...] "
            "(regexes applied in order)"
        )
    if unexpected and not missing:
        lines.append(
            "  Drop the extra keys with skip=[pattern, ...] (regexes), or pick a sub-dict with top_level_key=..."
        )
    lines.append("  (strict=False loads only the keys that match and leaves the rest of the module as it is)")
    return "\n".join(lines)
