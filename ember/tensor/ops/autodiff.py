"""The tensor's side of autodiff: tracking, backward and gradient access.

These only do something on an autodiff device (``Device.flex().autodiff()``); on a
plain device ``require_grad`` and ``detach`` return the tensor unchanged, as in Burn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ember.backend.autodiff.graph import Gradients
from ember.errors import DTypeError, GraphError, ShapeError
from ember.tensor.checks import FLOAT_NP, NP_TO_DTYPE
from ember.tensor.ops.base import TensorOpsBase

if TYPE_CHECKING:
    from typing import Self

    from ember.backend.autodiff.grad_hooks import RemovableHandle
    from ember.backend.autodiff.protocol import AutodiffProtocol


class AutodiffOps(TensorOpsBase):
    """Tracking, ``backward`` and gradient access."""

    __slots__ = ()

    def require_grad(self) -> Self:
        """This tensor as a leaf whose gradient ``backward`` computes (float tensors)."""
        return self.set_require_grad(True)

    def set_require_grad(self, require_grad: bool) -> Self:
        d = self._device
        if not d.is_autodiff():
            return self.__class__(self._primitive, self._device)
        if require_grad and self._primitive.dtype not in FLOAT_NP and self._primitive.dtype.kind != "c":
            raise DTypeError(
                f"ember: require_grad: only float and complex tensors have gradients, got {self.dtype}; cast first"
            )
        return self.__class__(
            cast("AutodiffProtocol", d._backend).set_require_grad(self._primitive, bool(require_grad)), d
        )

    def is_require_grad(self) -> bool:
        """Whether this tensor is tracked (a leaf requiring grad or computed from one)."""
        d = self._device
        return d.is_autodiff() and cast("AutodiffProtocol", d._backend).is_tracked(self._primitive)

    def detach(self) -> Self:
        """The same values, cut from the graph (no gradient flows through)."""
        d = self._device
        if not d.is_autodiff():
            return self.__class__(self._primitive, self._device)
        backend = cast("AutodiffProtocol", d._backend)
        if not backend.is_tracked(self._primitive):
            return self.__class__(self._primitive, self._device)
        return self.__class__(backend.detach(self._primitive), d)

    def register_hook(self, hook: Callable[[Any], Any]) -> RemovableHandle:
        """Calls ``hook(grad)`` with this tensor's gradient in every backward that
        reaches it, once the gradient is complete; a returned tensor (of this shape)
        replaces the gradient, ``None`` keeps it. On an op's output the replacement
        flows on to the op's inputs; on a leaf (a parameter's value) it is what
        ``tensor.grad(grads)`` and ``GradientsParams.from_grads`` read. Returns a handle
        whose ``remove()`` takes the hook off (PyTorch's ``Tensor.register_hook``).

        ``grad`` lives on the inner device, or on this autodiff device (tracked) in a
        ``backward(create_graph=True)``. A parameter's hook stays with this value: an
        optimizer step makes new values, so register again on the new model.

        >>> from ember import Device, Tensor
        >>> x = Tensor.from_floats([1.0, 2.0], device=Device.flex().autodiff()).require_grad()
        >>> y = x.mul_scalar(3.0)
        >>> handle = y.register_hook(lambda g: g.clamp(-1.0, 1.0))  # clip what flows back
        >>> x.grad(y.mul(y).sum().backward()).tolist()  # 3 * clamp(2 y)
        [3.0, 3.0]
        >>> handle.remove()
        """
        backend = self._autodiff_backend("register_hook")
        if not callable(hook):
            raise DTypeError(f"ember: register_hook: expected a function of the gradient, got {type(hook).__name__}")
        from ember.tensor.tensor import Tensor

        d = self._device
        shape, dtype = tuple(self._primitive.shape), self._primitive.dtype
        name = getattr(hook, "__name__", type(hook).__name__)

        def run(grad: Any, create_graph: bool) -> Any:
            device = d if create_graph else d.inner()
            new = hook(Tensor(grad, device))
            if new is None:
                return None
            if not isinstance(new, Tensor):
                raise DTypeError(
                    f"ember: register_hook: the hook {name} returned {type(new).__name__}; "
                    "return a Tensor (the new gradient) or None (keep it)"
                )
            if tuple(new._primitive.shape) != shape:
                raise ShapeError(
                    f"ember: register_hook: the hook {name} returned a gradient of shape {list(new._primitive.shape)}, "
                    f"but the tensor has shape {list(shape)}; a gradient has the shape of its tensor"
                )
            if new._primitive.dtype != dtype:
                new = new.cast(NP_TO_DTYPE[dtype])
            if new._device is not device:
                new = new.to_device(device)
            return new._primitive

        return backend.register_hook(self._primitive, run)

    def _autodiff_backend(self, op: str) -> AutodiffProtocol:
        d = self._device
        if d._inner is None:
            raise self._no_autodiff(op)
        backend: AutodiffProtocol = d._backend  # type: ignore[assignment]  # d is an autodiff device
        return backend

    @staticmethod
    def _check_grads(op: str, grads: Any) -> None:
        """``grads`` must be the ``Gradients`` of a ``backward`` (anything else, a dict
        say, would find no gradient and answer ``None`` as if there were none)."""
        if isinstance(grads, Gradients):
            return
        name = type(grads).__name__
        hint = "; a GradientsParams is keyed by parameter: use grads.get(param.id)" if name == "GradientsParams" else ""
        raise DTypeError(
            f"ember: {op}: expected the Gradients that loss.backward() returns, got {name}{hint}; "
            "pass the result of loss.backward()"
        )

    def _no_autodiff(self, op: str) -> GraphError:
        d = self._device
        return GraphError(
            f"ember: {op}: the tensor lives on {d!r}, which has no autodiff; create the model "
            f"and data on {d!r}.autodiff() (e.g. Device.flex().autodiff())"
        )

    def backward(
        self,
        create_graph: bool = False,
        *,
        retain_graph: bool | None = None,
        gradient: Any = None,
        inputs: Any = None,
    ) -> Any:
        """Reverse-mode gradients of this tensor with respect to every leaf that requires
        grad, as ``Gradients`` keyed by node id.

        ``create_graph=True`` records the backward pass itself: the gradients are then
        tracked tensors on this autodiff device, and a backward through them gives
        second (and higher) derivatives. ``retain_graph`` keeps the graph for another
        backward (default: ``create_graph``). ``gradient`` seeds the pass (a tensor of
        this shape; default ones: the gradient of ``sum(self)``). ``inputs`` (tensors)
        restricts the pass to their gradients; they may be intermediate results.
        """
        backend = self._autodiff_backend("backward")
        seed = None
        if gradient is not None:
            seed = self._seed("backward", gradient)
        wanted = None
        if inputs is not None:
            wanted = []
            for t in inputs:
                if t._device is not self._device:
                    raise GraphError(
                        f"ember: backward: an input lives on {t._device!r}, the loss on {self._device!r}; "
                        "inputs must be tensors of the loss's autodiff device"
                    )
                wanted.append(t._primitive)
        return backend.backward(
            self._primitive, seed, create_graph=bool(create_graph), retain_graph=retain_graph, inputs=wanted
        )

    def _seed(self, op: str, gradient: Any) -> Any:
        """``gradient`` as a primitive of this tensor's autodiff device."""
        from ember.tensor.tensor import Tensor

        if not isinstance(gradient, Tensor):
            raise DTypeError(f"ember: {op}: gradient must be a Tensor, got {type(gradient).__name__}")
        if gradient._primitive.shape != self._primitive.shape:
            raise ShapeError(
                f"ember: {op}: gradient has shape {gradient.dims()}, the tensor {self.dims()}; they must match"
            )
        if gradient._primitive.dtype != self._primitive.dtype:
            gradient = gradient.cast(self.dtype)
        if gradient._device is not self._device:
            gradient = gradient.to_device(self._device)
        return gradient._primitive

    def _grad_device(self, grads: Any) -> Any:
        return self._device if getattr(grads, "create_graph", False) else self._device.inner()

    def grad(self, grads: Any) -> Self | None:
        """This tensor's gradient in ``grads`` or ``None``: a tensor on the inner device,
        or a tracked tensor on this autodiff device when ``grads`` came from
        ``backward(create_graph=True)``."""
        backend = self._autodiff_backend("grad")
        if type(grads) is not Gradients:
            self._check_grads("grad", grads)
        g = backend.grad(self._primitive, grads)
        return None if g is None else self.__class__(g, self._grad_device(grads))

    def grad_remove(self, grads: Any) -> Self | None:
        """Like :meth:`grad`, and removes the gradient from ``grads``."""
        d = self._device
        inner = d._inner
        if inner is None:
            raise self._no_autodiff("grad_remove")
        backend: AutodiffProtocol = d._backend  # type: ignore[assignment]  # d is an autodiff device
        if type(grads) is not Gradients:
            self._check_grads("grad_remove", grads)
        g = backend.grad_remove(self._primitive, grads)
        if g is None:
            return None
        return self.__class__(g, d if grads.create_graph else inner)

    def grad_replace(self, grads: Any, grad: Any) -> None:
        """Sets this tensor's gradient in ``grads`` to ``grad`` (a tensor on the inner
        device, or on this autodiff device for ``create_graph`` gradients)."""
        backend = self._autodiff_backend("grad_replace")
        if type(grads) is not Gradients:
            self._check_grads("grad_replace", grads)
        from ember.tensor.tensor import Tensor

        if not isinstance(grad, Tensor):
            raise DTypeError(f"ember: grad_replace: the new gradient must be a Tensor, got {type(grad).__name__}")
        if tuple(grad._primitive.shape) != tuple(self._primitive.shape):
            raise ShapeError(
                f"ember: grad_replace: the new gradient has shape {list(grad._primitive.shape)}, the tensor has "
                f"{list(self._primitive.shape)}; a gradient has the shape of its tensor"
            )
        target = self._grad_device(grads)
        if grad._device != target:
            grad = grad.to_device(target)
        backend.grad_replace(self._primitive, grads, grad._primitive)
