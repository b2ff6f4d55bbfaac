"""``Identity``: returns its input."""

from __future__ import annotations

from typing import Any

from ember.module import Module


class Identity(Module):
    """Returns its input unchanged (a placeholder where a layer is optional)."""

    def forward(self, x: Any) -> Any:
        return x
