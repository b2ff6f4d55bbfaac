"""``Function``: an op with a backward written by hand (PyTorch's
``torch.autograd.Function``).

Subclass it with two static methods and call ``apply``::

    class Clip(Function):
        @staticmethod
        def forward(ctx, x, bound):  # any arguments; tensors and other values
            ctx.bound = bound
            return x.clamp(-bound, bound)

        @staticmethod
        def backward(ctx, g):  # one gradient per output
            return g, None  # one per input of forward (None: no gradient)

``forward`` runs on the inputs cut from the graph (its ops are not recorded), and the
call becomes one node whose backward is yours. ``backward`` receives Tensors on the
inner device, or, in ``backward(create_graph=True)``, tracked Tensors on the autodiff
device: written with tensor ops it is differentiated again (double backward). The
tensors it reads from ``ctx.saved_tensors`` are then the inputs and outputs of the call
themselves (a value computed inside ``forward`` and saved is a constant there, as in
PyTorch: recompute it in backward from the saved inputs to differentiate through it).
Under ``ember.compile`` backward is traced like any other op.

PyTorch 2's split form works too: ``forward(*args)`` without ctx plus
``setup_context(ctx, inputs, output)``. Keyword arguments of ``apply`` go to forward
and are never differentiated.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any

from ember.autograd.record import record, tracked_device
from ember.errors import GraphError
from ember.tensor import Tensor


class FunctionCtx:
    """The ``ctx`` a :class:`Function`'s ``forward`` and ``backward`` share. Set any
    attribute on it to pass non-tensor values from forward to backward."""

    def __init__(self, name: str, needs_input_grad: tuple[bool, ...]):
        #: Per input of ``forward``: whether its gradient is wanted (a tracked tensor).
        self.needs_input_grad = needs_input_grad
        self._function_name = name
        self._to_save: tuple[Tensor | None, ...] = ()
        self._saved: tuple[Tensor | None, ...] | None = None
        self._non_differentiable: tuple[Tensor, ...] = ()
        self._materialize_grads = True

    if TYPE_CHECKING:  # any attribute may be set (the runtime's own __setattr__)

        def __setattr__(self, name: str, value: Any) -> None: ...

    def __getattr__(self, name: str) -> Any:
        # Only reached for an attribute never set (user attributes are plain ones).
        raise AttributeError(
            f"ember: {self._function_name}: ctx has no attribute {name!r}; set it in forward (ctx.{name} = ...) "
            "to read it in backward"
        )

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        """Keeps tensors (inputs, outputs or others; ``None`` allowed) for backward,
        where ``ctx.saved_tensors`` gives them back in this order. Call it once, in
        forward. Saved inputs and outputs take part in a double backward."""
        self._to_save = tensors

    @property
    def saved_tensors(self) -> tuple[Tensor | None, ...]:
        """The tensors of :meth:`save_for_backward`, on the device backward runs on."""
        if self._saved is not None:
            return self._saved
        return self._to_save

    def mark_non_differentiable(self, *outputs: Tensor) -> None:
        """Declares outputs of forward (e.g. indices, masks) that have no gradient:
        they come back untracked and backward receives zeros for them."""
        self._non_differentiable = self._non_differentiable + outputs

    def set_materialize_grads(self, value: bool) -> None:
        """With ``False``, backward receives ``None`` (not zeros) for an output that no
        gradient reached."""
        self._materialize_grads = bool(value)


class Function:
    """Base class of an op with a custom backward (see the module docstring).

    >>> from ember import Device, Tensor
    >>> from ember.autograd import Function
    >>> class RoundSte(Function):  # straight-through estimator: round, identity gradient
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         return x.round()
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         return g
    >>> x = Tensor.from_floats([0.4, 1.6], device=Device.flex().autodiff()).require_grad()
    >>> y = RoundSte.apply(x)
    >>> y.tolist(), x.grad(y.mul_scalar(3.0).sum().backward()).tolist()
    ([0.0, 2.0], [3.0, 3.0])
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        name = type(self).__name__
        raise GraphError(
            f"ember: {name}(...): a Function is not instantiated; call {name}.apply(...) with the inputs of its forward"
        )

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any) -> Any:
        """The op's result (a Tensor, or a tuple of them and other values) from ``args``."""
        raise NotImplementedError

    @staticmethod
    def backward(ctx: FunctionCtx, *grads: Any) -> Any:
        """One gradient per input of forward (a Tensor of the input's shape, or ``None``),
        from one gradient per output."""
        raise NotImplementedError

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[Any, ...], output: Any) -> None:
        """PyTorch 2's split form: when a subclass defines it, ``forward(*args)`` takes
        no ctx and this fills ctx from the inputs and forward's output."""
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        """Runs ``forward`` on ``args`` and records the call with ``backward`` as its
        gradient (when an argument is a tracked tensor). Keyword arguments go to
        forward and are never differentiated."""
        name = cls.__name__
        if cls.forward is Function.forward:
            raise GraphError(f"ember: {name} defines no forward; add @staticmethod def forward(ctx, *inputs)")
        device, tracked = tracked_device(f"{name}.apply", args)
        ctx = FunctionCtx(name, tuple(tracked))
        if device is None:  # nothing to differentiate: a plain call
            return cls._run_forward(ctx, args, kwargs)
        seen = tuple(a.detach() if t else a for a, t in zip(args, tracked))
        result = cls._run_forward(ctx, seen, kwargs)
        single = not isinstance(result, (tuple, list))
        outputs = [result] if single else list(result)
        if not any(isinstance(o, Tensor) for o in outputs):
            raise GraphError(
                f"ember: {name}.forward returned no Tensor (got {type(result).__name__}); return the op's result"
            )
        if cls.backward is Function.backward:
            raise GraphError(
                f"ember: {name} defines no backward, but input(s) {[i for i, t in enumerate(tracked) if t]} need "
                "a gradient; add @staticmethod def backward(ctx, *grads) (or detach the inputs)"
            )

        def backward(grads: list[Tensor | None], saved: list[Tensor | None], dev: Any) -> Any:
            ctx._saved = tuple(saved)
            try:
                return cls.backward(ctx, *grads)
            finally:
                ctx._saved = None

        recorded = record(
            name,
            device,
            args,
            seen,
            tracked,
            outputs,
            ctx._to_save,
            ctx._non_differentiable,
            backward,
            ctx._materialize_grads,
        )
        ctx._to_save = ctx._non_differentiable = ()  # the node holds what backward needs
        if single:
            return recorded[0]
        return tuple(recorded) if isinstance(result, tuple) else recorded

    @classmethod
    def _run_forward(cls, ctx: FunctionCtx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not _has_setup_context(cls):
            return cls.forward(ctx, *args, **kwargs)
        result = cls.forward(*args, **kwargs)
        cls.setup_context(ctx, args, result)
        return result

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for method in ("forward", "backward", "setup_context"):
            if method not in cls.__dict__:
                continue
            if not isinstance(inspect.getattr_static(cls, method), staticmethod):
                raise GraphError(
                    f"ember: {cls.__name__}.{method} must be a @staticmethod taking ctx first "
                    f"(def {method}(ctx, ...)), as in torch.autograd.Function"
                )
            if method == "backward" or (method == "forward" and not _has_setup_context(cls)):
                setattr(cls, method, staticmethod(_checked(cls.__name__, method, cls.__dict__[method].__func__)))


def _has_setup_context(cls: type) -> bool:
    return getattr(cls, "setup_context", None) is not Function.setup_context


def _checked(name: str, method: str, fn: Any) -> Any:
    """``fn`` refusing a first argument that is not a ctx (a direct call of forward)."""

    @functools.wraps(fn)
    def checked(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(ctx, FunctionCtx):
            raise GraphError(
                f"ember: {name}.{method} was called directly (its first argument, a {type(ctx).__name__}, "
                f"is not a ctx); call {name}.apply(...) with the inputs of forward"
            )
        return fn(ctx, *args, **kwargs)

    return checked
