"""flex's fused cross entropy of logits ``[N, C]`` against class indices ``[N]``.

Forward: the log-softmax rows (kept for the backward) and each row's negative
log-probability at its target. Backward: ``softmax * g`` with ``g`` subtracted at the
targets, written into the one ``[N, C]`` array (the composite's gather, scatter and
softmax rules make three).
"""

from __future__ import annotations

import numpy as np

from ember.backend.flex.quiet import quietly
from ember.errors import IndexOutOfBoundsError

_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def _check_targets(targets: np.ndarray, classes: int) -> None:
    if targets.size and (targets.min() < 0 or targets.max() >= classes):
        bad = targets[(targets < 0) | (targets >= classes)][0]
        raise IndexOutOfBoundsError(
            f"ember: cross_entropy: target {int(bad)} is out of bounds for {classes} classes "
            f"(targets must lie in [0, {classes}))"
        )


@quietly
def cross_entropy(logits, targets):
    """See :meth:`ember.backend.base.Backend.cross_entropy`."""
    if logits.dtype not in _FLOATS or logits.ndim != 2 or targets.ndim != 1 or targets.dtype.kind not in "iu":
        return NotImplemented
    n, classes = logits.shape
    if classes == 0 or targets.shape[0] != n:
        return NotImplemented
    _check_targets(targets, classes)
    log_probs = np.subtract(logits, logits.max(axis=1, keepdims=True))
    e = np.exp(log_probs)
    log_probs -= np.log(np.add.reduce(e, axis=1, keepdims=True))
    losses = log_probs[np.arange(n), targets]
    np.negative(losses, out=losses)
    return losses, log_probs


@quietly
def cross_entropy_backward(log_probs, targets, grad):
    """See :meth:`ember.backend.base.Backend.cross_entropy_backward`."""
    if log_probs.dtype not in _FLOATS or grad.dtype != log_probs.dtype:
        return NotImplemented
    out = np.exp(log_probs)
    g = grad.reshape(-1, 1)
    out *= g
    out[np.arange(out.shape[0]), targets] -= g[:, 0]
    return out
