"""``ember.func``: function transforms over autodiff, as in JAX and ``torch.func``.

``grad``, ``value_and_grad``, ``vjp``, ``jvp``, ``hessian_vector_product`` take
functions of Tensors and Modules (a Module's gradient is a ``GradientsParams``, the
optimizer's input); they compose (``grad(grad(f))``) and trace under ``ember.compile``.
``apply_updates`` steps a module without cutting the graph (meta-learning).
``custom_vjp`` gives a function a hand-written backward (JAX's ``jax.custom_vjp``).

The package sits above ``ember.optim``: a Module's gradients are ``GradientsParams``.
"""

from ember.func.custom_vjp import custom_vjp
from ember.func.transforms import grad, hessian_vector_product, jvp, value_and_grad, vjp
from ember.func.updates import apply_updates

__all__ = ["apply_updates", "custom_vjp", "grad", "hessian_vector_product", "jvp", "value_and_grad", "vjp"]
