"""``WeightMap``: how a module's parameter names and layouts differ from another
framework's checkpoint (a Hugging Face ``model.safetensors``, a PyTorch state dict).

A module declares its map (``Module.weight_map()``); the loader reads it, never a
guess from shapes. Every rule works both ways, so a model loaded from a checkpoint
is written back in the same layout (``ember.models.save_pretrained``).

- :class:`Rename`: a run of path components in their keys and in ours
  (``Rename("attn.c_attn", "attn.qkv")`` turns ``h.0.attn.c_attn.weight`` into
  ``h.0.attn.qkv.weight``).
- :class:`Split`: one fused tensor of theirs into several of ours along an axis of
  their layout (a fused QKV projection into query, key and value).
- ``as_stored``: regexes over our keys whose arrays are already in ember's layout
  (Hugging Face's GPT-2 ``Conv1D`` weights are ``[in, out]``, as ember's ``Linear``),
  so the layer's own adaptation (``Linear`` transposes PyTorch's ``[out, in]``) is skipped.
- ``ignore``: regexes over their keys that are dropped on load: buffers that ember
  recomputes (rotary frequencies, causal masks) and weights tied to another one.
- ``computed``: regexes over our keys of running states the module computes itself
  (rotary tables): never expected in the checkpoint, never written to it.

>>> WeightMap(renames=(Rename("attn.c_attn", "attn.qkv"),)).rename_theirs("h.0.attn.c_attn.bias")
'h.0.attn.qkv.bias'
"""

from __future__ import annotations

from dataclasses import dataclass


def _replace_run(key: str, old: str, new: str) -> str:
    """``key`` with every whole-component run ``old`` replaced by ``new``."""
    parts, run, repl = key.split("."), old.split("."), new.split(".")
    out: list[str] = []
    i = 0
    while i < len(parts):
        if parts[i : i + len(run)] == run:
            out.extend(repl)
            i += len(run)
        else:
            out.append(parts[i])
            i += 1
    return ".".join(out)


def _split_at(key: str, run: str) -> tuple[str, str] | None:
    """``(prefix, leaf)`` where ``key`` is ``prefix + run + "." + leaf`` (prefix may be
    empty or end with a dot), else ``None``."""
    marker = run + "."
    if key.startswith(marker):
        return "", key[len(marker) :]
    at = key.find("." + marker)
    if at < 0:
        return None
    return key[: at + 1], key[at + 1 + len(marker) :]


@dataclass(frozen=True)
class Rename:
    """``theirs`` (a dotted run of path components in the checkpoint) is ``ours``."""

    theirs: str
    ours: str


@dataclass(frozen=True)
class Split:
    """Their fused ``theirs`` is the concatenation of our ``ours`` along ``axis`` (of
    their layout, before any transpose), in order, for every leaf under it (weight and
    bias). ``sizes`` gives the parts' lengths when they differ (grouped-query
    attention); equal parts otherwise."""

    theirs: str
    ours: tuple[str, ...]
    axis: int = 0
    sizes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class WeightMap:
    """A module's differences from a foreign checkpoint (see the module docstring)."""

    renames: tuple[Rename, ...] = ()
    splits: tuple[Split, ...] = ()
    as_stored: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    computed: tuple[str, ...] = ()

    def rename_theirs(self, key: str) -> str:
        """Their key as ours."""
        for rule in self.renames:
            key = _replace_run(key, rule.theirs, rule.ours)
        return key

    def rename_ours(self, key: str) -> str:
        """Our key as theirs."""
        for rule in reversed(self.renames):
            key = _replace_run(key, rule.ours, rule.theirs)
        return key


__all__ = ["Rename", "Split", "WeightMap"]
