"""Reverse-mode autodiff as a backend decorator (Burn's ``burn-autodiff``)."""

from ember.backend.autodiff.backend import AutodiffBackend
from ember.backend.autodiff.checkpoint import Checkpointing
from ember.backend.autodiff.graph import AutodiffTensor, Gradients

__all__ = ["AutodiffBackend", "AutodiffTensor", "Checkpointing", "Gradients"]
