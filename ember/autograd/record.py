"""One call of a user-defined differentiable function, recorded as one node of the
graph (the common part of :class:`~ember.autograd.Function` and
:func:`ember.func.custom_vjp`).

:func:`record` turns the outputs a forward computed into tracked outputs whose
backward is the user's; :func:`input_grads` checks what that backward returned
(one gradient per input, of the input's shape) with errors naming the function and
the input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from ember.device import Device
from ember.errors import DeviceError, DTypeError, GraphError, ShapeError
from ember.tensor import Tensor
from ember.tensor.checks import FLOAT_NP, NP_TO_DTYPE

if TYPE_CHECKING:
    from ember.backend.autodiff.protocol import AutodiffProtocol

#: ``backward(grads, saved, device) -> the returned gradients``: ``grads`` has one
#: Tensor (or ``None``) per output position, ``saved`` the saved Tensors, all on
#: ``device`` (the inner device in a first-order pass, the autodiff device, tracked,
#: under ``create_graph``).
UserBackward = Callable[[list[Tensor | None], list[Tensor | None], Device], Sequence[Tensor | None]]


def tracked_device(
    name: str, args: Sequence[Any], skip: frozenset[int] = frozenset()
) -> tuple[Device | None, list[bool]]:
    """The autodiff device of the tracked tensor arguments (``None`` when none is
    tracked) and, per argument, whether it is tracked (positions in ``skip`` never are)."""
    device: Device | None = None
    tracked = []
    for i, a in enumerate(args):
        is_tracked = i not in skip and isinstance(a, Tensor) and a.is_require_grad()
        tracked.append(is_tracked)
        if is_tracked:
            if device is None:
                device = a._device
            elif a._device is not device:
                raise DeviceError(
                    f"ember: {name}: input {i} lives on {a._device!r}, an earlier tracked input on {device!r}; "
                    "move the inputs to one autodiff device"
                )
    return device, tracked


def record(
    name: str,
    device: Device,
    args: Sequence[Any],
    seen: Sequence[Any],
    tracked: Sequence[bool],
    outputs: Sequence[Any],
    saved: Sequence[Any],
    non_differentiable: Sequence[Tensor],
    backward: UserBackward,
    materialize: bool = True,
) -> list[Any]:
    """``outputs`` (the forward's results: Tensors and other values) as the outputs of
    one node whose backward is ``backward``. ``seen`` are the arguments as the forward
    saw them (``args`` detached, or ``args`` themselves). ``saved`` holds per saved
    value a Tensor (an input as the forward saw it, an output, any other tensor) or
    ``None``; a tracked input is saved as the caller's tensor, so that a
    ``create_graph`` backward differentiates through it. With ``materialize`` an
    output no gradient reached gets zeros (else ``None``).

    The backward step holds the saved values, and of the inputs and outputs only
    their shapes and dtypes."""
    backend = cast("AutodiffProtocol", device._backend)
    positions = [j for j, o in enumerate(outputs) if isinstance(o, Tensor)]
    prims = []
    out_avals = []
    for j in positions:
        out = _on(name, f"output {j}", outputs[j], device)
        differentiable = out._primitive.dtype in FLOAT_NP and not any(
            out._primitive is m._primitive for m in non_differentiable
        )
        prims.append((backend.unwrap(out._primitive), differentiable))
        out_avals.append((out.dims(), NP_TO_DTYPE[out._primitive.dtype]))
    arg_avals = [_Aval(a) for a in args]
    n_outputs = len(outputs)
    inputs = [a._primitive if t else None for a, t in zip(args, tracked)]
    handles: list[Any] = []
    for value in saved:
        if value is None:
            handles.append(None)
            continue
        handles.append(_saved_handle(name, value, args, seen, tracked, outputs, positions, device))

    def step(grads: list[Any], values: list[Any], create_graph: bool) -> list[Any]:
        dev = device if create_graph else device.inner()
        by_position: list[Tensor | None] = [None] * n_outputs
        for k, j in enumerate(positions):
            if grads[k] is not None:
                by_position[j] = Tensor(grads[k], dev)
            elif materialize:
                shape, dtype = out_avals[k]
                by_position[j] = Tensor.zeros(shape, device=dev, dtype=dtype)
        saved_tensors = [None if v is None else Tensor(v, dev) for v in values]
        returned = backward(by_position, saved_tensors, dev)
        return [None if g is None else g._primitive for g in input_grads(name, returned, arg_avals, tracked, dev)]

    results = backend.custom(inputs, prims, handles, step)
    out_list = list(outputs)
    for k, j in enumerate(positions):
        out_list[j] = Tensor(results[k], device)
    return out_list


class _Aval:
    """What the checks of a returned gradient need of an argument: whether it is a
    Tensor, and its shape and dtype (or its type's name)."""

    __slots__ = ("is_tensor", "shape", "dtype", "kind")

    def __init__(self, arg: Any):
        self.is_tensor = isinstance(arg, Tensor)
        self.shape = tuple(arg._primitive.shape) if self.is_tensor else ()
        self.dtype: Any = arg._primitive.dtype if self.is_tensor else None  # a numpy dtype
        self.kind = type(arg).__name__


def _on(name: str, what: str, t: Tensor, device: Device) -> Tensor:
    if t._device is device:
        return t
    if t._device is device.inner() or t._device.inner() is device.inner():
        return t.to_device(device)
    raise DeviceError(
        f"ember: {name}: {what} lives on {t._device!r}, the tracked inputs on {device!r}; compute on one device"
    )


def _saved_handle(
    name: str,
    value: Any,
    args: Sequence[Any],
    seen: Sequence[Any],
    tracked: Sequence[bool],
    outputs: Sequence[Any],
    positions: list[int],
    device: Device,
) -> Any:
    if not isinstance(value, Tensor):
        raise DTypeError(
            f"ember: {name}: save_for_backward takes Tensors (or None), got {type(value).__name__}; "
            "keep other values as attributes of ctx (ctx.k = k)"
        )
    for k, j in enumerate(positions):
        if value is outputs[j] or value._primitive is outputs[j]._primitive:
            return k
    for a, b, t in zip(args, seen, tracked):
        if t and (value is b or value._primitive is b._primitive):
            return a._primitive
    return _on(name, "a saved tensor", value, device)._primitive


def input_grads(
    name: str, returned: Any, args: Sequence[_Aval], tracked: Sequence[bool], device: Device
) -> list[Tensor | None]:
    """The gradients a backward returned, one per argument (``None`` for the untracked
    ones), checked and brought to ``device`` and to each input's dtype."""
    if returned is None or isinstance(returned, Tensor):
        returned = (returned,)
    if not isinstance(returned, (tuple, list)):
        raise DTypeError(
            f"ember: {name}: backward returned {type(returned).__name__}; return one Tensor (or None) per "
            f"input of forward, as a tuple"
        )
    n = len(args)
    if len(returned) < n or any(g is not None for g in returned[n:]):
        raise GraphError(
            f"ember: {name}: backward returned {len(returned)} gradient(s), but forward took {n} input(s); "
            "return one per input (None for inputs without a gradient, such as non-tensor arguments)"
        )
    out: list[Tensor | None] = []
    for i in range(n):
        g, a = returned[i], args[i]
        if g is None:
            out.append(None)
            continue
        if not a.is_tensor:
            raise GraphError(
                f"ember: {name}: backward returned a gradient for input {i}, which is a {a.kind}, "
                "not a Tensor; return None at that position"
            )
        if not isinstance(g, Tensor):
            raise DTypeError(
                f"ember: {name}: backward returned a {type(g).__name__} as the gradient of input {i}; "
                "return a Tensor (or None)"
            )
        if tuple(g._primitive.shape) != a.shape:
            raise ShapeError(
                f"ember: {name}: backward returned a gradient of shape {g.dims()} for input {i}, which has "
                f"shape {list(a.shape)}; a gradient has the shape of its input"
            )
        if not tracked[i]:
            out.append(None)
            continue
        if g._primitive.dtype != a.dtype:
            g = g.cast(NP_TO_DTYPE[a.dtype])
        if g._device is not device:
            g = g.to_device(device)
        out.append(g)
    return out
