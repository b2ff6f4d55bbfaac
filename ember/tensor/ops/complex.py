"""Complex tensors (``complex64``, ``complex128``): their parts, and which ops take them.

A complex tensor is made from complex data (``Tensor.from_data(np.array([1 + 2j]))``),
from its parts (:func:`complex`, :func:`polar`, :func:`view_as_complex`) or by an FFT
(``ember.fft``). Arithmetic (``+ - * /``, ``matmul``, ``sum``, ``mean``), ``exp``,
``log``, ``sqrt``, the trigonometric functions, layout and indexing ops work on them as
in PyTorch, and so do gradients, in PyTorch's convention (see
``ember.backend.autodiff.rules.spectral``). Ops with no complex meaning (ordering
comparisons, ``max``, ``floor``...) raise a ``DTypeError`` that says what to use.
``flex`` holds both complex dtypes; ``cube`` holds complex64 (a ``vec2<f32>`` per element).

>>> import numpy as np
>>> from ember import Device, Tensor
>>> z = Tensor.from_data(np.array([3 + 4j, 1j], dtype=np.complex64), device=Device.flex())
>>> z.abs().tolist(), z.real().tolist(), z.conj().imag().tolist()
([5.0, 1.0], [3.0, 0.0], [-4.0, -1.0])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, ComplexOp, UnaryOp
from ember.errors import DTypeError, ShapeError
from ember.tensor.checks import FLOAT_NP, NP_TO_DTYPE, check_device
from ember.tensor.ops.base import TensorOpsBase

if TYPE_CHECKING:
    from typing import Self

    from ember.tensor.ops.base import TensorLike

COMPLEX_NP = frozenset({np.dtype(np.complex64), np.dtype(np.complex128)})

#: The elementwise ops defined on complex tensors (holomorphic, or bool-valued tests).
COMPLEX_UNARY = frozenset(
    {
        UnaryOp.NEG,
        UnaryOp.EXP,
        UnaryOp.EXPM1,
        UnaryOp.LOG,
        UnaryOp.LOG1P,
        UnaryOp.SQRT,
        UnaryOp.RSQRT,
        UnaryOp.RECIP,
        UnaryOp.SQUARE,
        UnaryOp.SIN,
        UnaryOp.COS,
        UnaryOp.TAN,
        UnaryOp.TANH,
        UnaryOp.SINH,
        UnaryOp.COSH,
        UnaryOp.IS_NAN,
        UnaryOp.IS_INF,
        UnaryOp.IS_FINITE,
    }
)
COMPLEX_BINARY = frozenset({BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL, BinaryOp.DIV, BinaryOp.EQ, BinaryOp.NE})


def complex_error(op: str, prim: Any) -> DTypeError:
    """The error of an op with no meaning on complex numbers."""
    return DTypeError(
        f"ember: {op}: not defined on complex tensors (dtype {NP_TO_DTYPE[prim.dtype]}, shape "
        f"{list(prim.shape)}), as in PyTorch; apply it to .abs(), .real() or .imag() instead"
    )


def check_complex_unary(name: str, op: UnaryOp, prim: Any) -> None:
    if op not in COMPLEX_UNARY:
        raise complex_error(name, prim)


def check_complex_binary(name: str, op: BinaryOp, prim: Any) -> None:
    if op not in COMPLEX_BINARY:
        raise complex_error(name, prim)


def _complex_op(self: TensorLike, op: ComplexOp, name: str) -> Any:
    p = self._primitive
    if p.dtype not in COMPLEX_NP:
        raise DTypeError(f"ember: {name}: needs a complex tensor, got dtype {self.dtype}; see Tensor.is_complex()")
    return self.__class__(self._device._backend.complex_unary(op, p), self._device)


def _float_part(op: str, t: Any) -> Any:
    if t._primitive.dtype not in FLOAT_NP:
        raise DTypeError(f"ember: {op}: needs float tensors, got dtype {t.dtype}; cast with .float() first")
    if t.dtype in (DType.FLOAT16, DType.BFLOAT16):
        return t.cast(DType.FLOAT32)
    return t


class ComplexOps(TensorOpsBase):
    """The parts of a complex tensor: ``real``, ``imag``, ``conj``, ``angle``
    (``abs`` is the modulus: see ``ArithmeticOps.abs``)."""

    __slots__ = ()

    def is_complex(self) -> bool:
        """Whether the dtype is ``complex64`` or ``complex128``."""
        return self._primitive.dtype in COMPLEX_NP

    def real(self) -> Self:
        """The real part (a float tensor of the same precision); a real tensor itself."""
        if self._primitive.dtype not in COMPLEX_NP:
            return self.__class__(self._primitive, self._device)
        return _complex_op(self, ComplexOp.REAL, "real")

    def imag(self) -> Self:
        """The imaginary part (a float tensor of the same precision)."""
        return _complex_op(self, ComplexOp.IMAG, "imag")

    def conj(self) -> Self:
        """The complex conjugate; a real tensor itself."""
        if self._primitive.dtype not in COMPLEX_NP:
            return self.__class__(self._primitive, self._device)
        return _complex_op(self, ComplexOp.CONJ, "conj")

    def angle(self) -> Self:
        """The argument ``atan2(imag, real)`` in ``(-pi, pi]``; of a real tensor ``pi``
        where it is negative, else 0 (as PyTorch; float result)."""
        if self._primitive.dtype not in COMPLEX_NP:
            x = self if self._primitive.dtype in FLOAT_NP else self.float()
            return x.lower_elem(0).cast(x.dtype).mul_scalar(np.pi).mask_where(x.is_nan(), x)
        return _complex_op(self, ComplexOp.ANGLE, "angle")

    def _complex_abs(self) -> Self:
        return _complex_op(self, ComplexOp.ABS, "abs")


def complex(real: Any, imag: Any) -> Any:
    """``real + i * imag`` from two float tensors of one shape and device (``torch.complex``):
    float32 (or half) gives complex64, float64 complex128.

    >>> from ember import Device, Tensor
    >>> import ember
    >>> z = ember.complex(Tensor.from_floats([1.0]), Tensor.from_floats([2.0]))
    >>> z.dtype, z.tolist()
    (DType.COMPLEX64, [(1+2j)])
    """
    check_device("complex", real, imag)
    real, imag = _float_part("complex", real), _float_part("complex", imag)
    if real.dtype != imag.dtype:
        raise DTypeError(
            f"ember: complex: real and imag must share a dtype, got {real.dtype} and {imag.dtype}; cast one first"
        )
    if real.shape != imag.shape:
        real, imag = real.expand(_broadcast(real, imag)), imag.expand(_broadcast(real, imag))
    return real.__class__(real._device._backend.complex(real._primitive, imag._primitive), real._device)


def _broadcast(a: Any, b: Any) -> list[int]:
    from ember.tensor.shape import broadcast_shapes

    return list(broadcast_shapes("complex", tuple(a.shape), tuple(b.shape)))


def polar(abs: Any, angle: Any) -> Any:
    """``abs * (cos(angle) + i sin(angle))`` (``torch.polar``).

    >>> import math, ember
    >>> from ember import Tensor
    >>> z = ember.polar(Tensor.from_floats([2.0]), Tensor.from_floats([math.pi]))
    >>> [round(v, 5) for v in (z.real().item(), z.imag().item())]
    [-2.0, -0.0]
    """
    return complex(abs.mul(angle.cos()), abs.mul(angle.sin()))


def view_as_real(z: Any) -> Any:
    """A complex tensor ``[...]`` as a float tensor ``[..., 2]`` of (real, imag) pairs
    (``torch.view_as_real``; a copy: ember's tensors are values)."""
    if z._primitive.dtype not in COMPLEX_NP:
        raise DTypeError(f"ember: view_as_real: needs a complex tensor, got dtype {z.dtype}")
    return z.__class__.stack([z.real(), z.imag()], -1)


def view_as_complex(x: Any) -> Any:
    """A float32/float64 tensor ``[..., 2]`` as the complex tensor ``[...]`` (``torch.view_as_complex``)."""
    if x._primitive.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise DTypeError(f"ember: view_as_complex: needs a float32 or float64 tensor, got dtype {x.dtype}")
    if x.rank == 0 or x.shape[-1] != 2:
        raise ShapeError(f"ember: view_as_complex: the last dim must have size 2, got shape {list(x.shape)}")
    return complex(x.select_dim(-1, 0), x.select_dim(-1, 1))
