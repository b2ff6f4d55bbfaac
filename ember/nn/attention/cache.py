"""A static key/value cache for autoregressive decoding.

Each layer's keys and values live in fixed ``[batch, n_kv_heads, max_len, head_dim]``
tensors; a step writes its new keys and values at a run-time position (an int tensor)
with tensor ops only, so ``ember.compile`` traces one decode step for every position.
:class:`LayerCache` and :class:`KvCache` pass into and out of compiled functions as
structures of tensors (:func:`ember.capture.register_dataclass`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ember.backend.dtype import DType
from ember.capture import register_dataclass
from ember.device import Device
from ember.errors import DTypeError, IndexOutOfBoundsError, ShapeError, ValueRangeError
from ember.nn.host import cheap_values
from ember.tensor import Tensor


@register_dataclass
@dataclass(frozen=True)
class LayerCache:
    """One attention layer's cached ``key`` and ``value``, each ``[batch, n_kv_heads,
    max_len, head_dim]``. Slots not yet written hold zeros; attention over the cache
    hides the slots after each query's own position.

    >>> cache = LayerCache.empty(1, 2, 8, 4)
    >>> k = Tensor.ones([1, 2, 3, 4])
    >>> cache.update(k, k, Tensor.from_ints([5])).key.sum_dim(3)[0, 0].reshape([8]).tolist()
    [0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 4.0, 4.0]
    """

    key: Tensor
    value: Tensor

    @staticmethod
    def empty(
        batch: int,
        n_kv_heads: int,
        max_len: int,
        head_dim: int,
        device: Device | None = None,
        dtype: DType | str = DType.FLOAT32,
    ) -> LayerCache:
        """A cache of zeros."""
        _check_sizes("LayerCache.empty", batch, n_kv_heads, max_len, head_dim)
        shape = [batch, n_kv_heads, max_len, head_dim]
        return LayerCache(
            Tensor.zeros(shape, device=device, dtype=dtype), Tensor.zeros(shape, device=device, dtype=dtype)
        )

    @property
    def max_len(self) -> int:
        return self.key.dims()[2]

    def update(self, key: Tensor, value: Tensor, position: Tensor) -> LayerCache:
        """A cache with ``key`` and ``value`` ``[batch, n_kv_heads, T, head_dim]`` written
        at the slots ``[position, position + T)``; ``position`` is an int tensor of
        shape ``[1]``. Slots outside ``[0, max_len)`` raise an
        :class:`~ember.errors.IndexOutOfBoundsError` on an eager flex device; elsewhere
        (other devices, inside ``ember.compile``) the part that does not fit is dropped."""
        dims = self.key.dims()
        for name, t in (("key", key), ("value", value)):
            if not isinstance(t, Tensor):
                raise DTypeError(f"ember: LayerCache.update: {name} must be a Tensor, got {type(t).__name__}")
            if t.rank != 4 or t.dims()[:2] != dims[:2] or t.dims()[3] != dims[3]:
                raise ShapeError(
                    f"ember: LayerCache.update: {name} must be [batch={dims[0]}, n_kv_heads={dims[1]}, T, "
                    f"head_dim={dims[3]}] to fit the cache {dims}, got {t.dims()}"
                )
        seq = key.dims()[2]
        if value.dims()[2] != seq:
            raise ShapeError(f"ember: LayerCache.update: key {key.dims()} and value {value.dims()} differ in length")
        slots = slot_offsets(position, self.max_len, "LayerCache.update", self.key.device)
        values = cheap_values(position)
        if values is not None and (values[0] < 0 or values[0] + seq > self.max_len):
            start = int(values[0])
            raise IndexOutOfBoundsError(
                f"ember: LayerCache.update: slots {start}..{start + seq} lie outside the cache's [0, max_len="
                f"{self.max_len}); make the cache longer (KvCache.empty(..., max_len)) or start a new one"
            )
        # Slot s takes row s - position of the new keys when that row exists.
        if seq == 1:  # a decode step: the one new row broadcasts over the slots, nothing to gather
            hidden = slots.equal_elem(0).reshape([1, 1, self.max_len, 1])
            return LayerCache(
                key=self.key.mask_where(hidden, key.cast(self.key.dtype)),
                value=self.value.mask_where(hidden, value.cast(self.value.dtype)),
            )
        written = slots.greater_equal_elem(0).bool_and(slots.lower_elem(seq))
        rows = slots.clamp(0, seq - 1)
        hidden = written.reshape([1, 1, self.max_len, 1])
        return LayerCache(
            key=self.key.mask_where(hidden, key.cast(self.key.dtype).select(2, rows)),
            value=self.value.mask_where(hidden, value.cast(self.value.dtype).select(2, rows)),
        )


def slot_offsets(position: Tensor, max_len: int, op: str, device: Device) -> Tensor:
    """``arange(max_len) - position`` (int64 ``[max_len]``): each cache slot's offset
    from ``position``, an int tensor of shape ``[1]``."""
    if not isinstance(position, Tensor) or position.is_float() or position.dtype.is_bool:
        raise DTypeError(f"ember: {op}: position must be an int Tensor of shape [1], got {position!r:.80}")
    if position.dims() != [1]:
        raise ShapeError(f"ember: {op}: position must have shape [1] (one start for the batch), got {position.dims()}")
    if position.device is not device:
        position = position.to_device(device)
    return Tensor.arange(max_len, device=device).sub(position.int())


def _check_sizes(op: str, *sizes: int) -> None:
    if any(not isinstance(s, int) or s <= 0 for s in sizes):
        raise ValueRangeError(
            f"ember: {op}: batch, n_kv_heads, max_len and head_dim must be ints > 0, got {list(sizes)}"
        )


@register_dataclass
@dataclass(frozen=True)
class KvCache:
    """The :class:`LayerCache` of every attention layer of a model.

    >>> KvCache.empty(2, 1, 4, 16, 8).max_len
    16
    """

    layers: tuple[LayerCache, ...]

    @staticmethod
    def empty(
        n_layers: int,
        batch: int,
        n_kv_heads: int,
        max_len: int,
        head_dim: int,
        device: Device | None = None,
        dtype: DType | str = DType.FLOAT32,
    ) -> KvCache:
        """``n_layers`` caches of zeros."""
        _check_sizes("KvCache.empty", n_layers, batch, n_kv_heads, max_len, head_dim)
        return KvCache(
            tuple(LayerCache.empty(batch, n_kv_heads, max_len, head_dim, device, dtype) for _ in range(n_layers))
        )

    @property
    def max_len(self) -> int:
        return self.layers[0].max_len

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, i: int) -> LayerCache:
        return self.layers[i]

    def replace_layer(self, i: int, layer: LayerCache) -> KvCache:
        """This cache with layer ``i`` replaced (as a model's forward collects them)."""
        if not -len(self.layers) <= i < len(self.layers):
            raise IndexOutOfBoundsError(f"ember: KvCache.replace_layer: layer {i} of a {len(self.layers)}-layer cache")
        layers = list(self.layers)
        layers[i] = layer
        return replace(self, layers=tuple(layers))
