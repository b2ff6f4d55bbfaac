"""``custom_vjp``: a function with a hand-written vector-Jacobian product (JAX's
``jax.custom_vjp``), for ``grad``, ``value_and_grad``, ``vjp`` and ``backward``.

``fwd(*args)`` returns ``(output, residuals)`` (residuals: any tree of tuples, lists,
dicts and Tensors); ``bwd(residuals, cotangent)`` returns one cotangent per argument
(a tuple; ``None`` for a non-tensor argument or a zero cotangent). As in JAX,
``fwd`` runs on the differentiated arguments themselves, so residuals computed from
them carry their graph and a second derivative (``grad(grad(f))``) differentiates
``bwd`` through them (the price: ``fwd``'s graph is kept until the backward pass).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ember.autograd.record import record, tracked_device
from ember.errors import ConfigError, GraphError
from ember.tensor import Tensor


def _flatten(tree: Any, leaves: list[Tensor]) -> Any:
    """``tree``'s structure with its Tensors moved to ``leaves`` (replaced by their index)."""
    if isinstance(tree, Tensor):
        leaves.append(tree)
        return _Index(len(leaves) - 1)
    if isinstance(tree, (tuple, list)):
        items = [_flatten(x, leaves) for x in tree]
        return tuple(items) if isinstance(tree, tuple) else items
    if isinstance(tree, dict):
        return {k: _flatten(v, leaves) for k, v in tree.items()}
    return tree


def _unflatten(tree: Any, leaves: Sequence[Any]) -> Any:
    if isinstance(tree, _Index):
        return leaves[tree.i]
    if isinstance(tree, (tuple, list)):
        items = [_unflatten(x, leaves) for x in tree]
        return tuple(items) if isinstance(tree, tuple) else items
    if isinstance(tree, dict):
        return {k: _unflatten(v, leaves) for k, v in tree.items()}
    return tree


class _InFwd(threading.local):
    depth = 0


class _Index:
    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


class custom_vjp:  # noqa: N801 (JAX's name: used as a decorator)
    """``fun`` with the vector-Jacobian product given by :meth:`defvjp`.

    ``nondiff_argnums`` name arguments that are never differentiated (Python values,
    or tensors held constant); ``bwd`` receives them first: ``bwd(*nondiff, res, g)``,
    and returns cotangents for the other arguments only.

    >>> from ember import Device, Tensor
    >>> from ember.func import custom_vjp, grad
    >>> @custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> def fwd(x):
    ...     return x, None
    >>> def bwd(res, g):
    ...     return (g.clamp(-1.0, 1.0),)
    >>> clip_gradient.defvjp(fwd, bwd)
    >>> x = Tensor.from_floats([1.0, 2.0], device=Device.flex().autodiff())
    >>> grad(lambda x: clip_gradient(x).mul_scalar(5.0).sum())(x).tolist()
    [1.0, 1.0]
    """

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: Sequence[int] = ()):
        if not callable(fun):
            raise ConfigError(f"ember: custom_vjp: expected a function, got {type(fun).__name__}")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self._name = f"custom_vjp({getattr(fun, '__name__', 'fun')})"
        self._in_fwd = _InFwd()  # fwd may call the function itself: that call is the plain one

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Sets the forward (``fwd(*args) -> (output, residuals)``) and backward
        (``bwd(residuals, cotangent) -> tuple of cotangents``) rules."""
        if not callable(fwd) or not callable(bwd):
            raise ConfigError(f"ember: {self._name}.defvjp: fwd and bwd must be functions")
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any) -> Any:
        name = self._name
        nondiff = self.nondiff_argnums
        for i in nondiff:
            if not -len(args) <= i < len(args):
                raise ConfigError(f"ember: {name}: nondiff_argnums names argument {i}, but the call has {len(args)}")
        skip = frozenset(i % len(args) for i in nondiff)
        device, tracked = tracked_device(name, args, skip)
        if device is None or self._in_fwd.depth:
            return self.fun(*args)
        fwd, bwd = self.fwd, self.bwd
        if fwd is None or bwd is None:
            raise GraphError(
                f"ember: {name}: an argument needs a gradient but no rule was given; call "
                f"{getattr(self.fun, '__name__', 'f')}.defvjp(fwd, bwd) first"
            )
        self._in_fwd.depth += 1
        try:
            pair = fwd(*args)
        finally:
            self._in_fwd.depth -= 1
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise GraphError(f"ember: {name}: fwd must return a pair (output, residuals), got {type(pair).__name__}")
        result, residuals = pair
        single = isinstance(result, Tensor)
        if not single and not (isinstance(result, (tuple, list)) and all(isinstance(o, Tensor) for o in result)):
            raise GraphError(
                f"ember: {name}: the output must be a Tensor or a tuple of Tensors, got {type(result).__name__}"
            )
        outputs = [result] if single else list(result)
        leaves: list[Tensor] = []
        structure = _flatten(residuals, leaves)
        kept = tuple(args[i] for i in sorted(skip))
        diff_positions = [i for i in range(len(args)) if i not in skip]
        n_args = len(args)  # the step keeps no reference to the arguments themselves

        def backward(grads: list[Tensor | None], saved: list[Tensor | None], dev: Any) -> Any:
            returned = bwd(*kept, _unflatten(structure, saved), grads[0] if single else tuple(grads))
            if isinstance(returned, list):
                returned = tuple(returned)
            if not isinstance(returned, tuple):
                raise GraphError(
                    f"ember: {name}: bwd must return a tuple with one cotangent per differentiated argument "
                    f"({len(diff_positions)}), got {type(returned).__name__}"
                )
            if len(returned) != len(diff_positions):
                raise GraphError(
                    f"ember: {name}: bwd returned {len(returned)} cotangent(s), but the function takes "
                    f"{len(diff_positions)} differentiated argument(s); return one each (None for a non-tensor)"
                )
            full: list[Any] = [None] * n_args
            for i, g in zip(diff_positions, returned):
                full[i] = g
            return full

        recorded = record(name, device, args, args, tracked, outputs, leaves, (), backward)
        if single:
            return recorded[0]
        return tuple(recorded) if isinstance(result, tuple) else recorded
