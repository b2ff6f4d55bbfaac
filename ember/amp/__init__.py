"""``ember.amp``: automatic mixed precision.

``autocast(device, dtype)`` picks each op's dtype (matmul, linear, convolutions in
bfloat16 or float16; losses and, for float16, reductions, softmax and norms in
float32) following PyTorch's autocast op lists; ``GradScaler`` scales float16 losses
dynamically; ``Precision`` names the Learner's modes (``"bf16-mixed"``, ``"16-mixed"``).

The package sits above ``ember.optim`` (the scaler steps a ``ModuleOptimizer`` with
``GradientsParams``); the per-op casting itself lives in ``ember.tensor.autocast``.
"""

from ember.amp.grad_scaler import GradScaler
from ember.amp.precision import Precision
from ember.tensor.autocast import BFLOAT16_POLICY, FLOAT16_POLICY, AutocastPolicy, autocast, policy_for

__all__ = ["BFLOAT16_POLICY", "FLOAT16_POLICY", "AutocastPolicy", "GradScaler", "Precision", "autocast", "policy_for"]
