"""Backends: the primitive-op protocol and its implementations."""

from ember.backend.base import Backend
from ember.backend.distribution import Distribution
from ember.backend.dtype import DType

__all__ = ["Backend", "DType", "Distribution"]
