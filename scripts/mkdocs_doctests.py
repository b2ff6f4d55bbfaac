"""A griffe extension for the book's API reference: the bare ``>>>`` examples of ember's
docstrings (doctest's form, run by tests/test_doctests.py) become fenced ``pycon`` blocks
(a console session), so mkdocs renders them as code instead of reading ``[1.0, 0.5][0.0]``
as a markdown link.

mkdocs.yml loads it with ``extensions: [scripts/mkdocs_doctests.py:DoctestBlocks]``.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    """Wrap each run of ``>>>`` lines and their output (up to a blank line) in a fence."""
    out: list[str] = []
    in_block = False
    for line in text.splitlines():
        stripped = line.strip()
        if not in_block and stripped.startswith(">>>"):
            out.append("```pycon")  # a Python console session: prompts and output
            in_block = True
        elif in_block and not stripped:
            out.append("```")
            in_block = False
        out.append(line)
    if in_block:
        out.append("```")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Fence the doctest examples of every loaded object's docstring."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
