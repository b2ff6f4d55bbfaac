"""Renderers: a live dashboard in a terminal, plain lines elsewhere."""

from __future__ import annotations

import sys
from typing import Any

from ember.errors import ConfigError
from ember.train.renderer.base import EpochReport, MetricsRenderer, TrainingInfo, TrainingProgress
from ember.train.renderer.plain import PlainRenderer


def default_renderer() -> MetricsRenderer:
    """The dashboard when stdout is a terminal and rich is installed, else plain lines."""
    isatty = getattr(sys.stdout, "isatty", None)
    if isatty is not None and isatty():
        try:
            from ember.train.renderer.dashboard import DashboardRenderer

            return DashboardRenderer()
        except ImportError:
            pass
    return PlainRenderer()


def make_renderer(choice: Any) -> MetricsRenderer:
    """``"auto"``, ``"dashboard"``, ``"plain"``, ``"none"`` or a renderer instance."""
    if isinstance(choice, MetricsRenderer):
        return choice
    if choice == "auto":
        return default_renderer()
    if choice == "plain":
        return PlainRenderer()
    if choice == "dashboard":
        from ember.train.renderer.dashboard import DashboardRenderer

        return DashboardRenderer()
    if choice in ("none", None):
        return MetricsRenderer()
    raise ConfigError(
        f"ember: renderer: expected 'auto', 'dashboard', 'plain', 'none' or a MetricsRenderer, got {choice!r}"
    )


__all__ = [
    "EpochReport",
    "MetricsRenderer",
    "PlainRenderer",
    "TrainingInfo",
    "TrainingProgress",
    "default_renderer",
    "make_renderer",
]
