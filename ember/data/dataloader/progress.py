"""``Progress``: how far an iteration over a dataset has come."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """``items_processed`` of ``items_total`` (Burn's ``Progress``)."""

    items_processed: int
    items_total: int

    @property
    def fraction(self) -> float:
        return self.items_processed / self.items_total if self.items_total else 1.0
