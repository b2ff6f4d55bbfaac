"""The op registry: every primitive op of the backend protocol, named by an enum.

Each op family of :class:`ember.backend.base.Backend` takes a member of one enum:
``unary`` a :class:`UnaryOp`, ``binary`` a :class:`BinaryOp`, ``reduce`` a
:class:`ReduceOp`, ``arg_reduce`` an :class:`ArgReduceOp`, ``cumulative`` a
:class:`CumulativeOp`. Every backend's table (flex's numpy functions, cube's WGSL
templates, autodiff's gradient rules, the fusion lowerings) is a mapping over these
enums, and ``tests/backend/test_protocol.py`` checks that each covers its enum.
The optional fused kernels (one kernel for a composite op) are named by :class:`FusedOp`.

Members are ``str`` instances equal to their value (``UnaryOp.EXP == "exp"``), so
they print, hash and serialise as plain names (cache keys, error messages, records).

Which ops are primitive. A few unary ops could be written over others; they stay
primitive because every target has them as one instruction or library call, and
the composite would be slower or less accurate:

* ``expm1``, ``log1p``, ``sinh``: composites over ``exp``/``log`` lose all digits
  near 0 (cancellation); numpy, WGSL (through helpers) and libm compute them exactly.
* ``cosh``, ``asin``, ``acos``, ``tanh``, ``erf``: one library call on every target;
  a composite (over ``exp``, ``atan2``, ``sqrt``) costs 3-5 passes eagerly and
  mishandles the domain edges (``asin`` outside [-1, 1] must be NaN).
* ``square``, ``recip``, ``rsqrt``: one pass instead of two, and their backward
  rules save one operand (``square``) or the output (``recip``, ``rsqrt``) instead of
  two; norms and Adam call them on every step.
* ``log2``, ``exp2``, ``log10``: one instruction (WGSL's ``log2``/``exp2``) or library
  call (numpy, libm); exact at powers of the base (``log10(1000) == 3``, which
  ``floor(log10(n))`` relies on), where ``log(x) / ln 10`` misses by an ulp for most
  of them (539 of the float64 powers 1e-300..1e299, 15 of the float32 ones).
* ``asinh``, ``acosh``, ``atanh``: one library call each; the textbook composites
  (``log(x + sqrt(x^2 + 1))``, ``0.5 log((1 + x) / (1 - x))``) lose every digit near 0
  (``asinh``, ``atanh``) or near 1 (``acosh``) and overflow ``x^2`` beyond 1.8e19.
* ``copysign`` (binary): one bit operation; a composite over ``sign``/comparisons
  cannot see the sign of ``-0.0`` or of a NaN. ``fmod`` is written over it exactly
  (``copysign(remainder(|a|, |b|), a)``).
* ``logcumsumexp`` (cumulative): a scan whose combine is ``logaddexp``. Composites
  either shift by the row's maximum (earlier elements far below it underflow to
  ``-inf``) or need ``log n`` passes of a doubling scan; the backward rule is written
  with the op itself, stably.

* ``LinalgOp`` (``Backend.linalg``): the matrix decompositions and solves. Each is a
  LAPACK call on every CPU (numpy's ``numpy.linalg``); a composite over matmul and
  elementwise ops would be an unblocked, unpivoted algorithm, slower by orders of
  magnitude and less stable. The default runs on the host (device -> host -> device),
  which is what cube does; flex calls numpy on its arrays directly.

Composites, not primitives: ``hypot`` (scaled by the larger magnitude: no overflow,
within 2 ulp), ``logaddexp``, ``lerp``, ``deg2rad``, ``fmod``, the integer division
modes, ``softsign`` and the other activations: each is a few passes of ops that are
already exact, and autodiff differentiates them for free.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast


class _OpNameType(type):
    """The metaclass of the op enums: members are plain class attributes.

    The standard library's ``EnumType`` defines ``__getattr__``, which routes every
    ``UnaryOp.EXP`` through a Python-level hook (~130 ns on CPython 3.11, against
    ~25 ns for a class attribute); op names are read on every op of every step, so
    these enums keep ``Enum``'s interface (iteration, ``Op(value)``, ``Op[name]``,
    ``name``/``value``, identity of members) without the hook.
    """

    _members: dict[str, Any]  # value -> member, set on each class built by ``__new__``

    def __new__(mcls, name: str, bases: tuple, namespace: dict[str, Any]) -> _OpNameType:
        cls = super().__new__(mcls, name, bases, namespace)
        members: dict[str, Any] = {}
        for key, value in namespace.items():
            if key.isupper() and isinstance(value, str):
                # ``cls`` is a ``str`` subclass (``OpName``'s); the checker sees only the metaclass.
                member: Any = str.__new__(cast("type[str]", cls), value)
                member._name = key
                type.__setattr__(cls, key, member)
                members[value] = member
        cls._members = members
        return cls

    def __call__(cls, value: str) -> Any:
        member = cls._members.get(value)
        if member is None:
            raise ValueError(f"{value!r} is not a valid {cls.__name__}; valid: {', '.join(cls._members)}")
        return member

    def __getitem__(cls, name: str) -> Any:
        member = cls.__dict__.get(name)
        if not isinstance(member, cls):
            raise KeyError(name)
        return member

    def __iter__(cls) -> Iterator[Any]:
        return iter(cls._members.values())

    def __len__(cls) -> int:
        return len(cls._members)

    def __contains__(cls, value: object) -> bool:
        return value in cls._members


if TYPE_CHECKING:
    from enum import StrEnum

    class OpName(StrEnum):
        """For the checker: the op enums keep ``StrEnum``'s interface (see ``_OpNameType``)."""

else:

    class OpName(str, metaclass=_OpNameType):
        """Base of the op enums: a ``str`` equal to its value, with ``name`` and ``value``."""

        _name: str

        @property
        def name(self) -> str:
            return self._name

        @property
        def value(self) -> str:
            return str.__str__(self)

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, spec: str) -> str:
            return format(str.__str__(self), spec)

        def __repr__(self) -> str:
            return f"<{type(self).__name__}.{self._name}: {str.__repr__(self)}>"

        def __reduce__(self) -> tuple:
            return (type(self), (str.__str__(self),))


class UnaryOp(OpName):
    """Elementwise ops of one operand (``Backend.unary``). ``is_*`` give bool."""

    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    LOG = "log"
    LOG1P = "log1p"
    EXPM1 = "expm1"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIP = "recip"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    TANH = "tanh"
    SINH = "sinh"
    COSH = "cosh"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    ERF = "erf"
    LOG2 = "log2"
    LOG10 = "log10"
    EXP2 = "exp2"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    SIGN = "sign"
    ROUND = "round"
    FLOOR = "floor"
    CEIL = "ceil"
    TRUNC = "trunc"
    SQUARE = "square"
    IS_NAN = "is_nan"
    IS_INF = "is_inf"
    IS_FINITE = "is_finite"
    LOGICAL_NOT = "logical_not"
    BITWISE_NOT = "bitwise_not"


class BinaryOp(OpName):
    """Elementwise ops of two operands with broadcasting (``Backend.binary``)."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    REMAINDER = "remainder"
    FLOOR_DIV = "floor_div"
    POW = "pow"
    ATAN2 = "atan2"
    COPYSIGN = "copysign"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    EQ = "eq"
    NE = "ne"
    GT = "gt"
    GE = "ge"
    LT = "lt"
    LE = "le"
    LOGICAL_AND = "logical_and"
    LOGICAL_OR = "logical_or"
    LOGICAL_XOR = "logical_xor"
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"
    LEFT_SHIFT = "left_shift"
    RIGHT_SHIFT = "right_shift"


class ReduceOp(OpName):
    """Reductions along one dim, kept with size 1 (``Backend.reduce``)."""

    SUM = "sum"
    MEAN = "mean"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    ANY = "any"
    ALL = "all"


class ArgReduceOp(OpName):
    """Index of the extreme along one dim (``Backend.arg_reduce``)."""

    ARGMAX = "argmax"
    ARGMIN = "argmin"


class CumulativeOp(OpName):
    """Inclusive scans along one dim (``Backend.cumulative``)."""

    CUMSUM = "cumsum"
    CUMPROD = "cumprod"
    CUMMAX = "cummax"
    CUMMIN = "cummin"
    LOGCUMSUMEXP = "logcumsumexp"


class LinalgOp(OpName):
    """Matrix decompositions and solves (``Backend.linalg``), batched over leading dims.

    Inputs are float matrices ``[..., m, n]``; the options and outputs of each are
    those of ``ember.backend.linalg_host``'s kernel of the same name (the reference):
    ``inv(check) -> (inverse, info)``, ``solve(check) -> (x, info)`` (``A X = B``, batch
    dims broadcast), ``solve_triangular(upper, unitriangular) -> (x,)``, ``det -> (det,)``,
    ``slogdet -> (sign, logabsdet)``, ``cholesky(check) -> (lower, info)``,
    ``qr(mode) -> (q, r)``, ``svd(full_matrices) -> (u, s, vh)``, ``svdvals -> (s,)``,
    ``eigh(uplo) -> (eigenvalues, eigenvectors)``, ``eigvalsh(uplo) -> (eigenvalues,)``,
    ``lstsq(rcond) -> (x, residuals, rank, singular_values)``,
    ``pinv(atol, rtol, hermitian) -> (pinv,)``, ``matrix_exp -> (exp,)``. ``info`` is int32
    of the batch shape: 0, or the 1-based pivot (leading minor) that failed.
    """

    INV = "inv"
    SOLVE = "solve"
    SOLVE_TRIANGULAR = "solve_triangular"
    DET = "det"
    SLOGDET = "slogdet"
    CHOLESKY = "cholesky"
    QR = "qr"
    SVD = "svd"
    SVDVALS = "svdvals"
    EIGH = "eigh"
    EIGVALSH = "eigvalsh"
    LSTSQ = "lstsq"
    PINV = "pinv"
    MATRIX_EXP = "matrix_exp"


class FusedOp(OpName):
    """Composite ops a backend may run as one kernel: each value is the name of an
    optional :class:`~ember.backend.base.Backend` method, which returns
    ``NotImplemented`` where the backend has no kernel. Each op's composite (its
    decomposition over the primitives, the one definition of its math) is written once
    over the protocol in :mod:`ember.backend.composites` (one module per family:
    ``activation``, ``layers``, ``loss``, ``norm``, ``attention``, ``grid_sample``,
    ``optim``, ``quantized``, ``rnn``, ``rnn_sequence``, ``spectral``); :func:`ember.tensor.fused.fused` is the tensor layer's one way to call
    the kernel or the composite, and the fusion layer expands the same composite.

    The backward kernels (``FUSED_BACKWARD_KERNELS``: ``Backend.linear_backward``,
    ``relu_backward``, ``gelu_backward``, ``layer_norm_backward``, ``rms_norm_backward``, ``cross_entropy_backward``,
    ``attention_backward``, ``grid_sample_backward``, ``lstm_cell_backward``,
    ``gru_cell_backward``, ``lstm_sequence_backward``, ``gru_sequence_backward``) are
    not listed: each is called by its op's autodiff rule (through
    ``ember.backend.composites.run`` where ``ember.backend.composites`` holds its
    composite: linear, relu, gelu, layer norm, RMS norm, cross entropy, the recurrent cells and
    sequences).
    """

    RELU = "relu"
    SIGMOID = "sigmoid"
    GELU = "gelu"
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    LINEAR = "linear"
    MSE_LOSS = "mse_loss"
    CROSS_ENTROPY = "cross_entropy"
    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    ATTENTION = "attention"
    QUANTIZED_LINEAR = "quantized_linear"
    QUANTIZED_CONV = "quantized_conv"
    GRID_SAMPLE = "grid_sample"
    ADAM_STEP_MANY = "adam_step_many"
    STFT_FRAMES = "stft_frames"
    LSTM_CELL = "lstm_cell"
    GRU_CELL = "gru_cell"
    LSTM_SEQUENCE = "lstm_sequence"
    GRU_SEQUENCE = "gru_sequence"


#: The backward kernels of fused ops: optional Backend methods (default
#: ``NotImplemented``) called by each op's autodiff rule.
FUSED_BACKWARD_KERNELS = {
    "linear_backward": FusedOp.LINEAR,
    "relu_backward": FusedOp.RELU,
    "gelu_backward": FusedOp.GELU,
    "layer_norm_backward": FusedOp.LAYER_NORM,
    "rms_norm_backward": FusedOp.RMS_NORM,
    "cross_entropy_backward": FusedOp.CROSS_ENTROPY,
    "attention_backward": FusedOp.ATTENTION,
    "grid_sample_backward": FusedOp.GRID_SAMPLE,
    "lstm_cell_backward": FusedOp.LSTM_CELL,
    "gru_cell_backward": FusedOp.GRU_CELL,
    "lstm_sequence_backward": FusedOp.LSTM_SEQUENCE,
    "gru_sequence_backward": FusedOp.GRU_SEQUENCE,
}


#: Binary ops whose result is bool.
COMPARISON_OPS = frozenset({BinaryOp.EQ, BinaryOp.NE, BinaryOp.GT, BinaryOp.GE, BinaryOp.LT, BinaryOp.LE})
BOOL_RESULT_BINARY = COMPARISON_OPS | {BinaryOp.LOGICAL_AND, BinaryOp.LOGICAL_OR, BinaryOp.LOGICAL_XOR}
#: Unary ops whose result is bool whatever the input dtype.
BOOL_RESULT_UNARY = frozenset({UnaryOp.IS_NAN, UnaryOp.IS_INF, UnaryOp.IS_FINITE, UnaryOp.LOGICAL_NOT})
#: Reductions whose result is bool.
BOOL_REDUCE_OPS = frozenset({ReduceOp.ANY, ReduceOp.ALL})


class ComplexOp(OpName):
    """Ops of one complex operand (``Backend.complex_unary``): ``real``, ``imag``,
    ``abs``, ``angle`` give the real dtype of the same precision; ``conj`` keeps the
    complex dtype. Primitive because no real op can reach the parts of a complex value."""

    REAL = "real"
    IMAG = "imag"
    CONJ = "conj"
    ABS = "abs"
    ANGLE = "angle"


class FftOp(OpName):
    """The discrete Fourier transforms of ``Backend.fft`` over one or more dims:
    ``fft``/``ifft`` complex to complex, ``rfft`` real to the non-negative half of the
    spectrum, ``irfft`` that half back to real. Primitive: an FFT is O(n log n) in one
    library call (pocketfft on flex), where a composite over matmul is O(n^2)."""

    FFT = "fft"
    IFFT = "ifft"
    RFFT = "rfft"
    IRFFT = "irfft"
