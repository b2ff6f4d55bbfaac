"""Reading a small tensor's values for an argument check, only where that is free."""

from __future__ import annotations

import numpy as np

from ember.tensor import Tensor
from ember.tensor.capture_hook import capturing


def cheap_values(t: Tensor) -> np.ndarray | None:
    """``t``'s values when reading them costs no device sync and breaks no trace (an
    eager flex tensor), else ``None``: the caller then skips its check. Used for the
    checks of run-time positions (rotary encoding, the KV cache) that must not stop
    ``ember.compile`` from tracing a decode step once."""
    if capturing() or t.device.is_fusion() or t.device.backend_name != "flex":
        return None
    return t.to_numpy()
