"""The eager CPU backend."""

from ember.backend.flex.backend import FlexBackend

__all__ = ["FlexBackend"]
