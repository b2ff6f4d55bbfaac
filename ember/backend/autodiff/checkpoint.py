"""Checkpointing strategies: what the graph keeps between forward and backward."""

from __future__ import annotations

from enum import Enum


class Checkpointing(Enum):
    """``DISABLED`` keeps every activation a backward step needs. ``BALANCED``
    (Burn's ``BalancedCheckpointing``) keeps the outputs of compute-bound ops
    (matmul, reductions, ...) and recomputes memory-bound ones (elementwise and
    layout ops) during backward, trading a little compute for memory.

    With ``backward(create_graph=True)`` the recomputed values enter the graph of the
    gradients as the outputs of their own nodes (so the second backward flows through
    them); that graph keeps them, as any graph keeps the inputs its steps need, until
    it is differentiated or dropped. The ops of that backward are recorded with the
    same strategy."""

    DISABLED = "Disabled"
    BALANCED = "Balanced"

    @property
    def label(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"Checkpointing.{self.name}"
