"""The tensor's side of autodiff: tracking, backward and gradient access.

These only do something on an autodiff device (``Device.flex().autodiff()``); on a
plain device ``require_grad`` and ``detach`` return the tensor unchanged, as in Burn.
"""

from __future__ import annotations

from typing import Any

from ember.errors import DTypeError, GraphError, ShapeError
from ember.tensor.dispatch import FLOAT_NP


class AutodiffOps:
    """Tracking, ``backward`` and gradient access."""

    __slots__ = ()

    def require_grad(self) -> Any:
        """This tensor as a leaf whose gradient ``backward`` computes (float tensors)."""
        return self.set_require_grad(True)

    def set_require_grad(self, require_grad: bool) -> Any:
        d = self._d
        if not d.is_autodiff():
            return self.__class__(self._p, self._d)
        if require_grad and self._p.dtype not in FLOAT_NP:
            raise DTypeError(
                f"ember: require_grad: only float tensors have gradients, got {self.dtype}; cast first"
            )
        return self.__class__(d._b.set_require_grad(self._p, bool(require_grad)), d)

    def is_require_grad(self) -> bool:
        """Whether this tensor is tracked (a leaf requiring grad or computed from one)."""
        d = self._d
        return d.is_autodiff() and d._b.is_tracked(self._p)

    def detach(self) -> Any:
        """The same values, cut from the graph (no gradient flows through)."""
        d = self._d
        if not d.is_autodiff() or not d._b.is_tracked(self._p):
            return self.__class__(self._p, self._d)
        return self.__class__(d._b.detach(self._p), d)

    def _autodiff_backend(self, op: str) -> Any:
        d = self._d
        if not d.is_autodiff():
            raise GraphError(
                f"ember: {op}: the tensor lives on {d!r}, which has no autodiff; create the model "
                f"and data on {d!r}.autodiff() (e.g. Device.flex().autodiff())"
            )
        return d._b

    def backward(self) -> Any:
        """Reverse-mode gradients of this tensor (one element) with respect to every
        leaf that requires grad, as ``Gradients`` keyed by node id."""
        backend = self._autodiff_backend("backward")
        return backend.backward(self._p)

    def grad(self, grads: Any) -> Any:
        """This tensor's gradient in ``grads`` as a tensor on the inner device, or ``None``."""
        backend = self._autodiff_backend("grad")
        g = backend.grad(self._p, grads)
        return None if g is None else self.__class__(g, self._d.inner())

    def grad_remove(self, grads: Any) -> Any:
        """Like :meth:`grad`, and removes the gradient from ``grads``."""
        d = self._d
        backend = d._b if d._inner is not None else self._autodiff_backend("grad_remove")
        g = backend.grad_remove(self._p, grads)
        return None if g is None else self.__class__(g, d._inner)

    def grad_replace(self, grads: Any, grad: Any) -> None:
        """Sets this tensor's gradient in ``grads`` to ``grad`` (a tensor on the inner device)."""
        backend = self._autodiff_backend("grad_replace")
        if tuple(grad._p.shape) != tuple(self._p.shape):
            raise ShapeError(
                f"ember: grad_replace: the new gradient has shape {list(grad._p.shape)}, the tensor has "
                f"{list(self._p.shape)}; a gradient has the shape of its tensor"
            )
        inner = self._d.inner()
        if grad._d != inner:
            grad = grad.to_device(inner)
        backend.grad_replace(self._p, grads, grad._p)
