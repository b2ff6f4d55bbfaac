"""The ember error hierarchy.

Every error ember raises for bad input is an :class:`EmberError`, and also the
builtin exception a Python user would expect (``ValueError`` for a wrong shape,
``TypeError`` for a wrong dtype, ...), so ``except ValueError`` keeps working.
Messages name the operation, the operands and what to do about it.
"""

from __future__ import annotations


class EmberError(Exception):
    """Base class of every error raised by ember."""


class ShapeError(EmberError, ValueError):
    """Operands have shapes or ranks that the operation cannot accept."""


class DTypeError(EmberError, TypeError):
    """An operand has a dtype that the operation cannot accept."""


class DeviceError(EmberError, ValueError):
    """Operands live on different devices, or a device cannot be used."""


class RankError(ShapeError, TypeError):
    """A rank-0 tensor where Python needs a sized sequence (``len()``, iteration); also a
    ``TypeError``, as ``len()`` of any unsized object."""


class IndexOutOfBoundsError(EmberError, IndexError):
    """An index or a dimension is out of range."""


class ValueRangeError(EmberError, ValueError):
    """A value argument is outside the range the operation accepts."""


class DivisionByZeroError(ValueRangeError, ZeroDivisionError):
    """An integer division or remainder by zero (float division gives inf or NaN instead)."""


class ScalarOverflowError(ValueRangeError, OverflowError):
    """A Python int beyond every dtype's range (past float64's largest value, about 1.8e308)."""


class LinAlgError(EmberError, ValueError):
    """A matrix a decomposition or solve cannot handle: singular to ``inv``/``solve``,
    not positive-definite to ``cholesky`` (the message names the batch element and the
    pivot or leading minor, as ``torch.linalg``'s), or one on which an iterative
    decomposition (``svd``, ``eigh``, ``lstsq``, ...) does not converge (an inf or NaN)."""


class GraphError(EmberError, RuntimeError):
    """Misuse of the autodiff graph (a consumed graph, no gradient to compute, ...)."""


class ConfigError(EmberError, ValueError):
    """A configuration has an invalid field."""


class UsageError(EmberError, TypeError):
    """A call in another library's form (PyTorch's ``x.sum(dim)``) that ember spells
    otherwise; the message gives ember's (Burn's) spelling and the equivalent."""


class UsageAttributeError(UsageError, AttributeError):
    """An attribute in another library's form (PyTorch's ``model.eval()``) that ember
    spells otherwise; also an ``AttributeError``, so ``hasattr`` stays ``False``."""


class ModuleError(EmberError, TypeError):
    """A module is declared or built incorrectly."""


class RecordError(EmberError, ValueError):
    """A record or checkpoint file is missing, corrupt or does not match the module."""


class DeviceMemoryError(EmberError, MemoryError):
    """A buffer is larger than the device allows, or the device is out of memory."""


class BackendUnavailableError(EmberError, RuntimeError):
    """A backend cannot run on this machine (no adapter, missing package, ...)."""


class DistributedError(EmberError, RuntimeError):
    """A distributed run cannot go on: ranks disagree (model structure, shapes, dtypes),
    a collective was misused, or another rank failed or stopped responding."""


class OnnxError(EmberError, ValueError):
    """An ONNX model cannot be read or imported: a malformed or truncated file, a failed
    model check, or an operator (or operator version) that ember does not implement."""


class FallbackWarning(RuntimeWarning):
    """A compiled path fell back to a slower one that computes the same values: a
    fusion plan whose lowering failed replays its ops one by one, a fusion device over
    flex without llvmlite replays instead of compiling. The message names the cause.
    The test suite turns it into an error (a fallback would hide a lowering bug behind
    the replay that the tests compare with); ``warnings.simplefilter("error",
    FallbackWarning)`` does the same in a user's program."""
