"""``PrecisionMetric``: true positives over predicted positives, in percent."""

from __future__ import annotations

import numpy as np

from ember.train.metric.confusion import ClassReduction, ConfusionMetric, ratio


class PrecisionMetric(ConfusionMetric):
    """``tp / (tp + fp)``. Build with ``PrecisionMetric.multiclass(top_k=1)`` (the
    default), ``.binary(threshold)`` or ``.multilabel(threshold)``; outputs are
    logits unless ``probabilities=True``.

    >>> PrecisionMetric.multiclass().with_class_reduction(ClassReduction.MICRO)
    PrecisionMetric(name='Precision')
    """

    def __init__(self, name: str = "Precision", **kwargs):
        super().__init__(name, **kwargs)

    def _score(self, tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
        return ratio(tp, tp + fp)


__all__ = ["ClassReduction", "PrecisionMetric"]
