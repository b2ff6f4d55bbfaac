"""The logits processors of ``generate``, on the host: repetition penalty, temperature,
top-k and top-p (nucleus), in the order ``transformers`` applies them, and the choice
of the next token (greedy, or inverse-CDF sampling with uniforms drawn on the device)."""

from __future__ import annotations

import numpy as np

from ember.errors import ConfigError


def check_options(temperature: float, top_k: int | None, top_p: float | None, repetition_penalty: float | None) -> None:
    """ConfigErrors naming a sampling option out of its range."""
    if not temperature >= 0.0:
        raise ConfigError(f"ember: generate: temperature must be >= 0 (0 is greedy), got {temperature}")
    if top_k is not None and (not isinstance(top_k, int) or top_k <= 0):
        raise ConfigError(f"ember: generate: top_k must be a positive int or None, got {top_k!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ConfigError(f"ember: generate: top_p must lie in (0, 1], got {top_p!r}")
    if repetition_penalty is not None and not repetition_penalty > 0.0:
        raise ConfigError(f"ember: generate: repetition_penalty must be > 0, got {repetition_penalty!r}")


def penalize_repetition(scores: np.ndarray, seen: np.ndarray, penalty: float) -> np.ndarray:
    """CTRL's penalty (Keskar et al., 2019) on the tokens each row has seen, as
    ``transformers``: a positive score is divided by ``penalty``, a negative one multiplied."""
    rows = np.arange(scores.shape[0])[:, None]
    picked = scores[rows, seen]
    scores = scores.copy()
    scores[rows, seen] = np.where(picked < 0, picked * penalty, picked / penalty)
    return scores


def top_k_filter(scores: np.ndarray, k: int) -> np.ndarray:
    """Scores below each row's ``k``-th largest set to ``-inf``."""
    k = min(k, scores.shape[-1])
    kth = np.partition(scores, -k, axis=-1)[:, -k][:, None]
    return np.where(scores < kth, -np.inf, scores)


def top_p_filter(scores: np.ndarray, p: float) -> np.ndarray:
    """The smallest set of most likely tokens whose probability reaches ``p`` is kept
    (at least one), as ``transformers``' ``TopPLogitsWarper``."""
    order = np.argsort(scores, axis=-1, kind="stable")  # ascending
    ordered = np.take_along_axis(scores, order, axis=-1)
    probs = _softmax(ordered)
    cumulative = np.cumsum(probs, axis=-1)
    drop = cumulative <= 1.0 - p
    drop[:, -1] = False
    removed = np.zeros_like(drop)
    np.put_along_axis(removed, order, drop, axis=-1)
    return np.where(removed, -np.inf, scores)


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=-1, keepdims=True)


def process(
    scores: np.ndarray,
    seen: np.ndarray,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    repetition_penalty: float | None,
) -> np.ndarray:
    """The processed scores of the last position (float64)."""
    scores = scores.astype(np.float64)
    if repetition_penalty is not None and repetition_penalty != 1.0:
        scores = penalize_repetition(scores, seen, repetition_penalty)
    if temperature > 0.0:
        if temperature != 1.0:
            scores = scores / temperature
        if top_k is not None:
            scores = top_k_filter(scores, top_k)
        if top_p is not None and top_p < 1.0:
            scores = top_p_filter(scores, top_p)
    return scores


def choose(scores: np.ndarray, uniforms: np.ndarray | None) -> np.ndarray:
    """Greedy (``uniforms is None``: the first largest score) or a draw from each row's
    softmax by inverse CDF with one uniform in [0, 1) per row."""
    if uniforms is None:
        return scores.argmax(axis=-1)
    cumulative = np.cumsum(_softmax(scores), axis=-1)
    targets = np.maximum(uniforms, 1e-12)[:, None] * cumulative[:, -1:]  # never a zero-probability token
    picks = (cumulative < targets).sum(axis=-1)
    return np.minimum(picks, scores.shape[-1] - 1)
