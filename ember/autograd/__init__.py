"""``ember.autograd``: gradients written by hand, in PyTorch's shape.

:class:`Function` is an op whose backward you write (``forward``/``backward`` static
methods, ``ctx.save_for_backward``, ``Function.apply``); it runs on every autodiff
device, differentiates again under ``backward(create_graph=True)`` when its backward
is written with tensor ops (:func:`once_differentiable` marks one that is not), and
traces under ``ember.compile``. Gradient hooks are a
Tensor method (``t.register_hook(fn)``); the functional form, JAX's ``custom_vjp``, is
:func:`ember.func.custom_vjp`.

The package sits just above ``ember.tensor``: it wraps the autodiff backend's custom
node (``ember/backend/autodiff/rules/custom.py``) in Tensors.
"""

from ember.autograd.function import Function, FunctionCtx
from ember.autograd.once import once_differentiable
from ember.backend.autodiff.grad_hooks import RemovableHandle

__all__ = ["Function", "FunctionCtx", "RemovableHandle", "once_differentiable"]
