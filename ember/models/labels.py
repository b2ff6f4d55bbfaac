"""The class labels of a classifier's ``config.json``, as ``transformers`` keeps them.

``transformers`` stores no ``num_labels``: it writes ``id2label`` (and ``label2id``)
and counts the first; a file with neither means two labels (its old default). A
config's ``num_labels`` field is read that way and written back as the two maps.
"""

from __future__ import annotations

from typing import Any

from ember.errors import ConfigError


def num_labels_of(owner: str, data: dict[str, Any]) -> int:
    """The number of labels a ``config.json`` mapping declares."""
    id2label = data.get("id2label")
    if id2label is not None:
        if not isinstance(id2label, dict):
            raise ConfigError(f"ember: {owner}: id2label must be an object {{id: label}}, got {id2label!r}")
        return len(id2label)
    value = data.get("num_labels", 2)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"ember: {owner}: num_labels must be an int >= 0, got {value!r}")
    return value


def with_label_maps(out: dict[str, Any], num_labels: int) -> dict[str, Any]:
    """``out`` (a ``to_hf`` mapping) with ``id2label``/``label2id`` for ``num_labels``:
    the kept maps when they have that many labels, ``LABEL_i`` names otherwise; no
    ``num_labels`` key."""
    out = dict(out)
    out.pop("num_labels", None)
    id2label = out.get("id2label")
    if not isinstance(id2label, dict) or len(id2label) != num_labels:
        id2label = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        out["id2label"] = id2label
        out["label2id"] = {label: int(i) for i, label in id2label.items()}
    return out
