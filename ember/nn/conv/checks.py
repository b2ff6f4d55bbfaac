"""Shared validation and helpers for the convolution and pooling layers."""

from __future__ import annotations

from typing import Any, Literal, overload

from ember.errors import ConfigError

#: What a layer's ``padding`` accepts: ``"valid"``, ``"same"``, an int, one int per
#: spatial dim (symmetric) or one ``(before, after)`` pair per spatial dim.
PaddingSpec = str | int | tuple[int, ...] | tuple[tuple[int, int], ...]


@overload
def as_tuple(name: str, field: str, value: Any, rank: Literal[1], minimum: int = 1) -> tuple[int]: ...


@overload
def as_tuple(name: str, field: str, value: Any, rank: Literal[2], minimum: int = 1) -> tuple[int, int]: ...


@overload
def as_tuple(name: str, field: str, value: Any, rank: Literal[3], minimum: int = 1) -> tuple[int, int, int]: ...


@overload
def as_tuple(name: str, field: str, value: Any, rank: int, minimum: int = 1) -> tuple[int, ...]: ...


def as_tuple(name: str, field: str, value: Any, rank: int, minimum: int = 1) -> tuple[int, ...]:
    """An int or ``rank`` ints as a tuple, each at least ``minimum`` (else ConfigError)."""
    values = (value,) * rank if isinstance(value, int) and not isinstance(value, bool) else tuple(value)
    if len(values) != rank or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ConfigError(f"ember: {name}: {field} must be an int or {rank} ints, got {value!r}")
    if any(v < minimum for v in values):
        raise ConfigError(f"ember: {name}: {field} must be >= {minimum}, got {value!r}")
    return values


def check_padding(name: str, padding: Any, rank: int) -> None:
    """Raise ConfigError unless ``padding`` is a valid :data:`PaddingSpec` for ``rank`` dims."""
    if isinstance(padding, str):
        if padding.lower() not in ("valid", "same"):
            raise ConfigError(
                f"ember: {name}: padding must be 'valid', 'same', an int or per-dim values, got {padding!r}"
            )
        return
    if isinstance(padding, int) and not isinstance(padding, bool):
        values: tuple = (padding,)
    elif isinstance(padding, tuple) and len(padding) == rank:
        values = tuple(v for p in padding for v in (p if isinstance(p, tuple) else (p,)))
    else:
        raise ConfigError(
            f"ember: {name}: padding must be 'valid', 'same', an int, {rank} ints or {rank} (before, after) pairs, "
            f"got {padding!r}"
        )
    if any(v < 0 for v in values):
        raise ConfigError(f"ember: {name}: padding must be >= 0, got {padding!r}")


def check_groups(name: str, channels_in: int, channels_out: int, groups: int) -> None:
    """Both channel counts must be positive and divisible by ``groups``."""
    if channels_in <= 0 or channels_out <= 0:
        raise ConfigError(f"ember: {name}: channels must be > 0, got ({channels_in}, {channels_out})")
    if groups < 1:
        raise ConfigError(f"ember: {name}: groups must be >= 1, got {groups}")
    if channels_in % groups or channels_out % groups:
        raise ConfigError(
            f"ember: {name}: both channels must be divisible by the number of groups; got channels_in={channels_in}, "
            f"channels_out={channels_out}, groups={groups}"
        )


def conv_params(
    initializer: Any, weight_shape: tuple[int, ...], fan_in: int, fan_out: int, bias: bool, device: Any
) -> tuple[Any, Any]:
    """Lazily initialised ``(weight, bias)`` parameters of a convolution."""
    weight = initializer.lazy(weight_shape, fan_in, fan_out, device)
    bias_param = initializer.lazy((weight_shape[0],), fan_in, fan_out, device) if bias else None
    return weight, bias_param


def describe_conv(module: Any, channels_in: int, channels_out: int) -> str:
    return (
        f"ch_in: {channels_in}, ch_out: {channels_out}, kernel_size: {module.kernel_size}, stride: {module.stride}, "
        f"padding: {module.padding!r}, dilation: {module.dilation}, groups: {module.groups}, "
        f"bias: {module.bias is not None}"
    )


def check_padding_out(name: str, padding_out: Any, stride: Any, dilation: Any, rank: int) -> None:
    """``padding_out`` (PyTorch's ``output_padding``) must be below the stride or the
    dilation in each dim."""
    out = as_tuple(name, "padding_out", padding_out, rank, minimum=0)
    strides = as_tuple(name, "stride", stride, rank)
    dilations = as_tuple(name, "dilation", dilation, rank)
    if any(o >= max(s, d) for o, s, d in zip(out, strides, dilations)):
        raise ConfigError(
            f"ember: {name}: padding_out {padding_out!r} must be smaller than the stride {stride!r} "
            f"or the dilation {dilation!r} in each dim"
        )


def conv_transpose_params(
    initializer: Any, channels_in: int, channels_out: int, kernel: tuple[int, ...], groups: int, bias: bool, device: Any
) -> tuple[Any, Any]:
    """Lazily initialised ``(weight, bias)`` of a transposed convolution; the fans are
    PyTorch's for its weight layout ``[in, out / groups, *kernel]``."""
    k = 1
    for size in kernel:
        k *= size
    fan_in, fan_out = channels_out // groups * k, channels_in // groups * k
    weight = initializer.lazy((channels_in, channels_out // groups) + kernel, fan_in, fan_out, device)
    bias_param = initializer.lazy((channels_out,), fan_in, fan_out, device) if bias else None
    return weight, bias_param
