"""Function transforms over ember's autodiff: ``grad``, ``value_and_grad``, ``vjp``,
``jvp`` and ``hessian_vector_product``.

Each call lifts the differentiated arguments (see :mod:`ember.func.tree`), runs the
function once, and takes one backward pass restricted to those arguments
(``backward(inputs=...)``). Transforms compose: a transform called while another one
runs builds the graph of its gradients (``create_graph``), so ``grad(grad(f))`` is the
second derivative. ``create_graph=True`` forces that graph at top level too, e.g. for
a MAML-style outer loss through an inner update.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from ember.errors import ConfigError, GraphError, ShapeError
from ember.func.tree import Lifted, cotangent_like, follow, value_of
from ember.tensor import Tensor

if TYPE_CHECKING:
    from ember.backend.autodiff.protocol import AutodiffProtocol


class _Local(threading.local):
    depth = 0  # the class default: no failed lookup on the common path


_local = _Local()


def _depth() -> int:
    return _local.depth


@contextmanager
def _entered():
    _local.depth = _depth() + 1
    try:
        yield
    finally:
        _local.depth -= 1


def _argnums(argnums: int | Sequence[int], n_args: int, op: str) -> tuple[tuple[int, ...], bool]:
    single = isinstance(argnums, int)
    nums: tuple[Any, ...] = (argnums,) if isinstance(argnums, int) else tuple(argnums)  # checked below
    if not nums or not all(isinstance(i, int) and not isinstance(i, bool) for i in nums):
        raise ConfigError(f"ember: {op}: argnums must be an int or a non-empty tuple of ints, got {argnums!r}")
    out: list[int] = []
    for i in nums:
        j = i + n_args if i < 0 else i
        if not 0 <= j < n_args:
            raise ConfigError(f"ember: {op}: argnums {argnums!r} names argument {i}, but the function got {n_args}")
        out.append(j)
    if len(set(out)) != len(out):
        raise ConfigError(f"ember: {op}: argnums {argnums!r} repeats an argument")
    return tuple(out), single


def _split_aux(result: Any, has_aux: bool, op: str) -> tuple[Any, Any]:
    if not has_aux:
        return result, None
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise ConfigError(f"ember: {op}: with has_aux=True the function must return a pair (output, aux)")
    return result[0], result[1]


def _scalar_output(out: Any, op: str) -> Tensor:
    if not isinstance(out, Tensor):
        raise GraphError(f"ember: {op}: the function must return a Tensor, got {type(out).__name__}")
    if out.num_elements() != 1:
        raise ShapeError(
            f"ember: {op}: the function must return a tensor with one element (a loss), got shape "
            f"{out.dims()}; reduce it (e.g. .sum()) or use ember.func.vjp for other outputs"
        )
    return out


def _run(fn: Callable, args: tuple, kwargs: dict, nums: tuple[int, ...], op: str) -> tuple[Lifted, list, Any]:
    lifted = Lifted(op)
    call_args = list(args)
    specs = []
    for i in nums:
        call_args[i], spec = lifted.lift(args[i], f"argument {i}")
        specs.append(spec)
    moves = lifted.lifted_devices()
    if moves:
        call_args = [a if i in nums else follow(a, moves) for i, a in enumerate(call_args)]
        kwargs = {k: follow(v, moves) for k, v in kwargs.items()}
    with _entered():
        result = fn(*call_args, **kwargs)
    return lifted, specs, result


def _backward(
    out: Tensor, lifted: Lifted, create_graph: bool, seed: Tensor | None = None, retain_graph: bool | None = None
) -> Any:
    if not out._device.is_autodiff() or not out.is_require_grad():
        return _NoGrads(create_graph)
    for t in lifted.tensors():
        if t._device is not out._device:
            raise GraphError(
                f"ember: the function's output lives on {out._device!r} but a differentiated argument on "
                f"{t._device!r}; compute on one device"
            )
    return out.backward(create_graph, retain_graph=retain_graph, gradient=seed, inputs=lifted.tensors())


class _NoGrads:
    """The gradients of an output that does not depend on any input: none (zeros)."""

    def __init__(self, create_graph: bool):
        self.create_graph = create_graph

    def get(self, node_id: int) -> None:
        return None


def _wants_graph(create_graph: bool | None) -> bool:
    return _depth() > 0 if create_graph is None else bool(create_graph)


def _returned(out: Tensor, lifted: Lifted, keep_graph: bool) -> Tensor:
    value = value_of(out, keep_graph)
    inner = value._device.inner()
    if not keep_graph and value._device is not inner and lifted.slots and all(s.home is inner for s in lifted.slots):
        return value.to_device(inner)
    return value


def value_and_grad(
    fn: Callable[..., Any],
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    create_graph: bool | None = None,
) -> Callable[..., Any]:
    """``fn`` returning ``(value, gradient)``: the gradient of its one-element output
    with respect to argument ``argnums`` (a tuple gives a tuple of gradients).

    A Tensor argument gets a Tensor gradient on its device; a Module argument gets a
    :class:`~ember.optim.GradientsParams` of its parameters that require grad (ready
    for ``optim.step``); tuples, lists and dicts get the same container. With
    ``has_aux`` ``fn`` returns ``(output, aux)`` and the result is ``((value, aux),
    gradient)``. ``create_graph`` (default: only when called inside another transform)
    makes the value and gradients tracked, differentiable again.

    >>> loss, grads = value_and_grad(loss_fn)(model, x, y)  # doctest: +SKIP
    >>> model = optim.step(1e-3, model, grads)              # doctest: +SKIP
    """
    op = "value_and_grad"

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        nums, single = _argnums(argnums, len(args), op)
        keep = _wants_graph(create_graph)
        lifted, specs, result = _run(fn, args, kwargs, nums, op)
        out, aux = _split_aux(result, has_aux, op)
        out = _scalar_output(out, op)
        grads = _backward(out, lifted, keep)
        gradients = [lifted.gradient(spec, grads) for spec in specs]
        value = _returned(out, lifted, keep)
        g = gradients[0] if single else tuple(gradients)
        return ((value, aux) if has_aux else value), g

    wrapped.__name__ = f"value_and_grad({getattr(fn, '__name__', 'fn')})"
    wrapped.__doc__ = fn.__doc__
    return wrapped


def grad(
    fn: Callable[..., Any],
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    create_graph: bool | None = None,
) -> Callable[..., Any]:
    """``fn`` returning the gradient of its one-element output (see :func:`value_and_grad`);
    with ``has_aux``, ``(gradient, aux)``. ``grad(grad(f))`` is the second derivative.

    >>> from ember import Device, Tensor
    >>> x = Tensor.from_floats([1.0, 2.0], device=Device.flex().autodiff())
    >>> df = grad(lambda x: x.powi_scalar(3).sum())
    >>> grad(lambda x: df(x).sum())(x).tolist()  # 6 x
    [6.0, 12.0]
    """
    inner = value_and_grad(fn, argnums, has_aux, create_graph)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        value, g = inner(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    wrapped.__name__ = f"grad({getattr(fn, '__name__', 'fn')})"
    wrapped.__doc__ = fn.__doc__
    return wrapped


def vjp(fn: Callable[..., Any], *primals: Any, has_aux: bool = False, create_graph: bool | None = None) -> Any:
    """``(output, vjp_fn)`` (and ``aux`` with ``has_aux``): ``vjp_fn(cotangent)`` gives
    the vector-Jacobian products for each primal (a tuple), and may be called several
    times. ``fn``'s output is a Tensor of any shape; the cotangent has its shape."""
    op = "vjp"
    keep = _wants_graph(create_graph)
    lifted, specs, result = _run(fn, primals, {}, tuple(range(len(primals))), op)
    out, aux = _split_aux(result, has_aux, op)
    if not isinstance(out, Tensor):
        raise GraphError(f"ember: {op}: the function must return a Tensor, got {type(out).__name__}")

    def vjp_fn(cotangent: Tensor) -> tuple[Any, ...]:
        seed = cotangent_like(out, cotangent, op)
        grads = _backward(out, lifted, keep or _depth() > 0, seed, retain_graph=True)
        return tuple(lifted.gradient(spec, grads) for spec in specs)

    value = _returned(out, lifted, keep)
    return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)


def jvp(
    fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], create_graph: bool | None = None
) -> tuple[Tensor, Tensor]:
    """``(fn(*primals), J t)``: the Jacobian-vector product in the direction ``tangents``
    (one per primal, each in the primal's shape: a Tensor for a Tensor, a
    ``GradientsParams`` for a Module).

    Computed by reverse mode twice: ``J^T u`` is built as a graph in a dummy cotangent
    ``u``, and ``J t`` is its gradient with respect to ``u``."""
    op = "jvp"
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ConfigError(
            f"ember: {op}: got {len(primals)} primals and {len(tangents)} tangents; give one tangent each"
        )
    keep = _wants_graph(create_graph)
    lifted, specs, out = _run(fn, primals, {}, tuple(range(len(primals))), op)
    if not isinstance(out, Tensor):
        raise GraphError(f"ember: {op}: the function must return a Tensor, got {type(out).__name__}")
    value = _returned(out, lifted, keep)
    if not out._device.is_autodiff() or not out.is_require_grad():
        return value, Tensor.zeros(out._primitive.shape, value._device, out.dtype)
    backend = cast("AutodiffProtocol", out._device._backend)
    dummy = Tensor(
        backend.leaf(backend.unwrap(out._device._backend.full(out._primitive.shape, 0, out.dtype))), out._device
    )
    grads = out.backward(True, gradient=dummy, inputs=lifted.tensors())
    total = None
    for spec, tangent in zip(specs, tangents):
        for g, t in _pairs(lifted.gradient(spec, grads), tangent, op):
            term = g.mul(t.to_device(g._device) if t._device is not g._device else t).sum()
            total = term if total is None else total.add(term)
    if total is None or not total.is_require_grad():
        return value, Tensor.zeros(out._primitive.shape, value._device, out.dtype)
    product = dummy.grad(total.backward(keep, inputs=[dummy]))
    if product is None:
        product = Tensor.zeros(out._primitive.shape, out._device if keep else out._device.inner(), out.dtype)
    if not keep and value._device is not product._device:
        product = product.to_device(value._device)
    return value, product


def hessian_vector_product(
    fn: Callable[..., Any],
    primals: Any,
    vectors: Any,
    argnums: int | Sequence[int] = 0,
    create_graph: bool | None = None,
) -> Any:
    """``H v``: the Hessian of ``fn``'s one-element output with respect to
    argument(s) ``argnums`` of ``primals`` (a tuple of arguments, or one argument),
    times ``vectors`` (shaped like those arguments' gradients), without forming ``H``.

    >>> hvp = hessian_vector_product(loss_fn, (model, x, y), v)  # v: GradientsParams  # doctest: +SKIP
    """
    args = primals if isinstance(primals, tuple) else (primals,)
    _, single = _argnums(argnums, len(args), "hessian_vector_product")
    vectors = (vectors,) if single else tuple(vectors)
    keep = _wants_graph(create_graph)
    first = grad(fn, argnums, create_graph=True)

    def inner_product(*xs: Any) -> Tensor | None:  # None (no pairs) is reported by grad
        g = first(*xs)
        gs = (g,) if single else g
        total: Tensor | None = None
        for gi, vi in zip(gs, vectors):
            for a, b in _pairs(gi, vi, "hessian_vector_product"):
                term = a.mul(b.to_device(a._device) if b._device is not a._device else b).sum()
                total = term if total is None else total.add(term)
        return total

    return grad(inner_product, argnums, create_graph=keep)(*args)


def _pairs(gradient: Any, vector: Any, op: str) -> list[tuple[Tensor, Tensor]]:
    """Matching ``(gradient, vector)`` tensors of two trees of one shape."""
    from ember.optim import GradientsParams

    if isinstance(gradient, Tensor):
        if not isinstance(vector, Tensor) or vector._primitive.shape != gradient._primitive.shape:
            raise ShapeError(
                f"ember: {op}: a vector must match its argument's shape {gradient.dims()}, got "
                f"{vector.dims() if isinstance(vector, Tensor) else type(vector).__name__}"
            )
        return [(gradient, vector)]
    if isinstance(gradient, GradientsParams):
        if not isinstance(vector, GradientsParams):
            raise ConfigError(
                f"ember: {op}: the vector for a Module argument must be a GradientsParams (keyed by ParamId), "
                f"got {type(vector).__name__}"
            )
        out = []
        for pid, g in gradient.items():
            v = vector.get(pid)
            if v is not None:
                out.extend(_pairs(g, v, op))
        return out
    if isinstance(gradient, dict):
        return [p for k in gradient for p in _pairs(gradient[k], vector[k], op)]
    if isinstance(gradient, (tuple, list)):
        if len(vector) != len(gradient):
            raise ConfigError(f"ember: {op}: a vector has {len(vector)} entries, its argument {len(gradient)}")
        return [p for g, v in zip(gradient, vector) for p in _pairs(g, v, op)]
    raise ConfigError(f"ember: {op}: cannot pair a gradient of type {type(gradient).__name__} with a vector")
