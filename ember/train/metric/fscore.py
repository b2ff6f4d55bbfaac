"""``FBetaScoreMetric``: the weighted harmonic mean of precision and recall."""

from __future__ import annotations

import numpy as np

from ember.errors import ConfigError
from ember.train.metric.confusion import ConfusionMetric, ratio


class FBetaScoreMetric(ConfusionMetric):
    """``(1 + beta^2) tp / ((1 + beta^2) tp + beta^2 fn + fp)`` in percent (F1 for
    ``beta=1``); recall counts ``beta`` times as much as precision. Built like
    :class:`~ember.train.metric.PrecisionMetric`: ``FBetaScoreMetric.multiclass(beta=2.0)``."""

    def __init__(self, beta: float = 1.0, name: str | None = None, **kwargs):
        if not beta > 0:
            raise ConfigError(f"ember: FBetaScoreMetric: beta must be > 0, got {beta}")
        self.beta = float(beta)
        default = "F1 Score" if self.beta == 1.0 else f"F{self.beta:g} Score"
        super().__init__(name or default, **kwargs)

    def _score(self, tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
        b2 = self.beta**2
        tp = tp.astype(np.float64)
        return ratio((1 + b2) * tp, (1 + b2) * tp + b2 * fn + fp)
