"""``Batcher``: turns a list of items into one batch on a device (Burn's ``Batcher``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import ConfigError, DTypeError, ShapeError
from ember.tensor import Tensor

I = TypeVar("I")  # noqa: E741
O = TypeVar("O", covariant=True)  # noqa: E741


@runtime_checkable
class Batcher(Protocol[I, O]):
    """``batch(items, device)`` returns the batch the model's step takes.

    A batcher runs on the loader's worker threads when ``num_workers > 0``: keep it a
    function of its items (seed any augmentation from the items, not a shared
    generator) so that batches are the same on every run.

    >>> class XyBatcher:
    ...     def batch(self, items, device):
    ...         x = Tensor.from_data(np.stack([i[0] for i in items]), device=device)
    ...         y = Tensor.from_data(np.array([i[1] for i in items]), device=device)
    ...         return x, y
    """

    def batch(self, items: list[I], device: Device) -> O: ...


class FnBatcher:
    """A batcher from a function ``fn(items, device) -> batch``."""

    def __init__(self, fn: Callable[[list[Any], Device], Any]):
        self.fn = fn

    def batch(self, items: list[Any], device: Device) -> Any:
        return self.fn(items, device)

    def __repr__(self) -> str:
        return f"FnBatcher({getattr(self.fn, '__name__', self.fn)!r})"


def as_batcher(op: str, batcher: Any) -> Batcher:
    if isinstance(batcher, Batcher):
        return batcher
    if callable(batcher):
        return FnBatcher(batcher)
    raise ConfigError(
        f"ember: {op}: expected a batcher (an object with batch(items, device)) or a function "
        f"fn(items, device), got {type(batcher).__name__}"
    )


class DefaultBatcher:
    """Stacks items into tensors, as PyTorch's ``default_collate``: numpy arrays,
    tensors and numbers become one tensor with a leading batch dim; tuples, named
    tuples, dicts and dataclasses are batched field by field; strings and other
    values are kept in a list. Float arrays become ``float_dtype`` (float32) unless
    it is ``None``.

    >>> items = [(np.ones(3), 0), (np.zeros(3), 1)]
    >>> x, y = DefaultBatcher().batch(items, Device.flex())
    >>> x.dims(), y.tolist()
    ([2, 3], [0, 1])
    """

    def __init__(self, float_dtype: DType | str | None = DType.FLOAT32):
        self.float_dtype = None if float_dtype is None else DType.parse(float_dtype)

    def batch(self, items: list[Any], device: Device) -> Any:
        if not items:
            raise ShapeError("ember: DefaultBatcher: cannot batch an empty list of items")
        return self._collate(list(items), device, "item")

    def _collate(self, items: list[Any], device: Device, where: str) -> Any:
        first = items[0]
        if isinstance(first, Tensor):
            return Tensor.stack([t.to_device(device) for t in items], 0)
        if isinstance(first, (np.ndarray, np.generic, int, float, bool)) and not isinstance(first, (str, bytes)):
            return self._stack(items, device, where)
        if dataclasses.is_dataclass(first) and not isinstance(first, type):
            fields = {
                f.name: self._collate([getattr(i, f.name) for i in items], device, f"{where}.{f.name}")
                for f in dataclasses.fields(first)
            }
            return type(first)(**fields)
        if isinstance(first, Mapping):
            return {key: self._collate([i[key] for i in items], device, f"{where}[{key!r}]") for key in first}
        if isinstance(first, tuple) and hasattr(first, "_fields"):
            return type(first)(
                *(
                    self._collate([i[k] for i in items], device, f"{where}.{name}")
                    for k, name in enumerate(first._fields)
                )
            )
        if isinstance(first, Sequence) and not isinstance(first, (str, bytes)):
            lengths = {len(i) for i in items}
            if len(lengths) != 1:
                raise ShapeError(f"ember: DefaultBatcher: the items' {where} have different lengths {sorted(lengths)}")
            return tuple(self._collate([i[k] for i in items], device, f"{where}[{k}]") for k in range(len(first)))
        return list(items)

    def _stack(self, items: list[Any], device: Device, where: str) -> Tensor:
        try:
            array = np.stack([np.asarray(i) for i in items])
        except ValueError:
            shapes = sorted({str(list(np.shape(i))) for i in items})
            raise ShapeError(
                f"ember: DefaultBatcher: the items' {where} have different shapes ({', '.join(shapes)}); "
                "pad or resize them in a MapperDataset, or write a Batcher"
            ) from None
        if array.dtype.kind == "f" and self.float_dtype is not None:
            array = array.astype(self.float_dtype.np)
        elif array.dtype.kind in "iu" and array.dtype != np.uint8:
            array = array.astype(np.int64)
        elif array.dtype.kind not in "biuf":
            raise DTypeError(
                f"ember: DefaultBatcher: cannot make a tensor from the items' {where} of dtype {array.dtype}"
            )
        return Tensor.from_data(array, device=device)
