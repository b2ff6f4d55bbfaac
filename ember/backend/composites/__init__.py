"""Each fused op's math, written once over the backend protocol.

A fused op (:class:`~ember.backend.ops.FusedOp`, and the backward kernels of
``FUSED_BACKWARD_KERNELS``) is an optional :class:`~ember.backend.base.Backend` method
that returns ``NotImplemented`` where the backend has no kernel. Its *composite*, the
one definition of its math, is a function ``fn(ops, *args, **options)`` over the
primitive ops of any backend ``ops``, registered here under the method's name:

* the tensor layer's :func:`ember.tensor.fused.fused` runs it where the device's
  backend declines (on an autodiff backend the composite's primitives are
  differentiated);
* the fusion layer runs it where the wrapped backend declines a recorded call, and a
  lowering expands a recorded call by running it over a recording backend;
* autodiff's rules run the backward kernels' composites through :func:`run`.

A backend adds speed (its own kernel), never a second definition. Arguments that are
floats may arrive as run-time scalars of a captured step, so the arithmetic on them
uses :func:`scalar_sqrt` instead of ``math.sqrt``.

>>> import numpy as np
>>> from ember.backend.flex import FlexBackend
>>> ops = FlexBackend()
>>> COMPOSITES["softmax"](ops, np.array([[0.0, 0.0]], np.float32), 1).tolist()
[[0.5, 0.5]]
"""

from __future__ import annotations

from ember.backend.composites import (  # noqa: F401
    activation,
    attention,
    grid_sample,
    layers,
    loss,
    norm,
    optim,
    quantized,
    quantized_conv,
    rnn,
    rnn_sequence,
    spectral,
)
from ember.backend.composites.registry import COMPOSITES, composite, run, scalar_sqrt, stop_gradient

__all__ = ["COMPOSITES", "composite", "run", "scalar_sqrt", "stop_gradient"]
