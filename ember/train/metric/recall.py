"""``RecallMetric``: true positives over actual positives, in percent."""

from __future__ import annotations

import numpy as np

from ember.train.metric.confusion import ConfusionMetric, ratio


class RecallMetric(ConfusionMetric):
    """``tp / (tp + fn)``; built like :class:`~ember.train.metric.PrecisionMetric`."""

    def __init__(self, name: str = "Recall", **kwargs):
        super().__init__(name, **kwargs)

    def _score(self, tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
        return ratio(tp, tp + fn)
