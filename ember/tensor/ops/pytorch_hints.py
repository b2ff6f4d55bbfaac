"""Errors that teach a PyTorch user ember's (Burn's) spelling.

ember keeps Burn's names and shapes: a full reduction (``sum()``) gives shape
``[1]``, a reduction along a dim (``sum_dim(d)``) keeps that dim with size 1. A
PyTorch call such as ``x.sum(-1)`` or ``x.mean(dim=1, keepdim=True)`` has no single
ember meaning under the name ``sum``, so it raises a :class:`~ember.errors.UsageError`
naming Burn's form and the PyTorch-shaped equivalent, with the shapes they give for
this tensor. Attribute names PyTorch users reach for (``numpy``, ``t``, ``dim``, ...)
raise an ``AttributeError`` naming ember's.
"""

from __future__ import annotations

from typing import Any

from ember.errors import UsageError

# name -> (Burn's method along one dim, its PyTorch-shaped equivalent (format: d), extra advice)
_REDUCTIONS = {
    "sum": ("sum_dim", "x.sum_dims_squeeze([{d}])", ""),
    "mean": ("mean_dim", "x.mean_dim({d}).squeeze_dim({d})", ""),
    "prod": ("prod_dim", "x.prod_dim({d}).squeeze_dim({d})", ""),
    "max": ("max_dim", "x.amax({d})", "; PyTorch's (values, indices) pair is x.max_dim_with_indices({d}) (dim kept)"),
    "min": ("min_dim", "x.amin({d})", "; PyTorch's (values, indices) pair is x.min_dim_with_indices({d}) (dim kept)"),
    "any": ("any_dim", "x.any_dim({d}).squeeze_dim({d})", ""),
    "all": ("all_dim", "x.all_dim({d}).squeeze_dim({d})", ""),
}


def _dim_of(args: tuple, kwargs: dict[str, Any]) -> Any:
    if args:
        return args[0]
    for key in ("dim", "axis"):
        if key in kwargs:
            return kwargs[key]
    return None


def reduction_error(x: Any, name: str, args: tuple, kwargs: dict[str, Any]) -> UsageError:
    """The error for ``x.<name>(*args, **kwargs)``, a full reduction called with
    PyTorch's arguments."""
    method, squeezed, extra = _REDUCTIONS[name]
    dim = _dim_of(args, kwargs)
    shape = x.dims()
    keepdim = kwargs.get("keepdim")
    unknown = sorted(set(kwargs) - {"dim", "axis", "keepdim"})
    if unknown or len(args) > 1 or isinstance(dim, (list, tuple)) or dim is None:
        if isinstance(dim, (list, tuple)):
            return UsageError(
                f"ember: Tensor.{name}() reduces every element (shape [1]); for several dims use "
                f"x.{method}s({list(dim)}) (the dims kept with size 1, Burn's form)"
                + (f" or x.sum_dims_squeeze({list(dim)}) (removed, PyTorch's)" if name == "sum" else "")
            )
        given = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        return UsageError(
            f"ember: Tensor.{name}() takes no arguments (it reduces every element, shape [1]), got ({given}); "
            f"along one dim d use x.{method}(d) (d kept with size 1)"
        )
    rank = max(len(shape), 1)  # a 0-d tensor takes dims 0 and -1, as in PyTorch
    try:
        index = dim + rank if dim < 0 else dim
        kept = [1 if i == index else n for i, n in enumerate(shape)]
        removed = [n for i, n in enumerate(shape) if i != index]
        if not 0 <= index < rank:
            raise IndexError
    except (TypeError, IndexError):
        return UsageError(f"ember: Tensor.{name}: dim {dim!r} is not a dim of a tensor of shape {shape}")
    burn = f"x.{method}({dim}) (Burn's form: the dim is kept, shape {kept})"
    if keepdim:
        return UsageError(
            f"ember: Tensor.{name}() reduces every element (shape [1]); for PyTorch's "
            f"x.{name}({dim}, keepdim=True) use {burn}"
        )
    return UsageError(
        f"ember: Tensor.{name}() reduces every element (shape [1]); along dim {dim} use {burn}, or "
        f"{squeezed.format(d=dim)} for PyTorch's x.{name}({dim}) (the dim removed, shape {removed}){extra.format(d=dim)}"
    )


#: Attributes PyTorch users reach for that ember spells otherwise: name -> advice.
ATTRIBUTE_HINTS = {
    "numpy": "x.to_numpy() (or x.to_data() for a TensorData)",
    "t": "x.transpose() (or x.swap_dims(0, 1))",
    "dim": "x.rank (or len(x.dims()))",
    "ndimension": "x.rank",
    "long": "x.int() (int64)",
    "double": "x.cast('float64')",
    "half": "x.cast('float16')",
    "to": "x.to_device(device) for a device, x.cast(dtype) for a dtype",
    "type": "x.cast(dtype); x.dtype reads it",
    "contiguous": "nothing: ember's ops take tensors in any layout",
    "cpu": "x.to_device(Device.flex())",
    "cuda": "x.to_device(Device.cuda(0)) (or a wgpu device)",
    "backward_": "x.backward() (it returns the gradients)",
    "grad_fn": "x.is_require_grad(); gradients come from loss.backward(), read with x.grad(grads)",
    "requires_grad_": "x.require_grad()",
    "requires_grad": "x.is_require_grad() (set with x.require_grad())",
    "masked_fill_": "x = x.masked_fill(mask, value) (tensors are immutable)",
    "zero_": "x = x.zeros_like() (tensors are immutable)",
    "fill_": "x = x.full_like(value) (tensors are immutable)",
    "add_": "x = x.add(y) (tensors are immutable)",
    "mul_": "x = x.mul(y) (tensors are immutable)",
    "copy_": "x = y (tensors are immutable)",
    "view_as": "x.reshape(other.dims())",
    "expand_as": "x.expand(other.dims())",
    "type_as": "x.cast(other.dtype)",
    "nelement": "x.num_elements()",
    "element_size": "x.dtype.itemsize",
    # A Tensor where a Function's ctx belongs: forward or backward called directly.
    "save_for_backward": "MyFunction.apply(x, ...) to call a Function (its forward gets the ctx)",
    "saved_tensors": "MyFunction.apply(x, ...) to call a Function (its backward gets the ctx)",
    "needs_input_grad": "MyFunction.apply(x, ...) to call a Function (its forward gets the ctx)",
    "mark_non_differentiable": "MyFunction.apply(x, ...) to call a Function (its forward gets the ctx)",
}


def attribute_error(name: str) -> AttributeError:
    hint = ATTRIBUTE_HINTS.get(name)
    if hint is None:
        return AttributeError(f"'Tensor' object has no attribute {name!r}")
    return AttributeError(f"ember: Tensor has no attribute {name!r} (a PyTorch name); use {hint}")
