"""The backend protocol: the primitive ops every backend implements.

A backend works on its own tensor *primitive* (a numpy array for ``flex``, a GPU
buffer handle for ``cube``, a tracked node for ``autodiff``). Every primitive exposes
``shape`` (a tuple of ints) and ``dtype`` (a numpy dtype; ``DType.np`` maps ember's
dtypes to them). Primitives are values: an op never changes its inputs.

The :class:`ember.Tensor` layer checks arguments (shapes, dtypes, devices, ranges)
before it calls a backend, so a backend may assume:

* the operands of ``binary``/``where``/``matmul``/``cat``... share one dtype
  (the tensor layer promotes first), and broadcast by numpy's rules;
* ``dim`` arguments are non-negative and in range; shapes are tuples of ints;
* a scalar operand is a Python ``int``/``float``/``bool`` fitting the dtype.

Composite ops (variance, most losses, ...) are written once above this protocol, in
``ember.tensor`` and ``ember.nn``. The ones a backend may run as one kernel are *fused*
ops (:class:`ember.backend.ops.FusedOp`: softmax, layer norm, linear, Adam...): each is
an optional method below whose default returns ``NotImplemented``, and its math is
written once over this protocol in :mod:`ember.backend.composites`, which
:func:`ember.tensor.fused.fused`, the fusion layer's executors and lowerings, and
autodiff's rules all fall back to.

Module ops (convolution, pooling, embedding and their backward ops) come from
:class:`ember.backend.module_ops.ModuleOps`, whose defaults are written over the
primitives here; a backend overrides them with faster kernels (flex does).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.backend import linalg_host
from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.backend.module_ops import ModuleOps
from ember.backend.ops import ArgReduceOp, BinaryOp, ComplexOp, CumulativeOp, FftOp, LinalgOp, ReduceOp, UnaryOp

Primitive = Any
Scalar = int | float | bool
Slices = tuple[tuple[int, int, int], ...]

# The op families below take the members of the enums in ember.backend.ops.


class Backend(ModuleOps, ABC):
    """The primitive ops of a backend. See the module docstring for the contract."""

    #: A short name, such as ``"flex"``.
    name: str = "backend"
    #: The fusion target that lowers this backend's streams and captured steps
    #: (``"llvm"``, ``"wgsl"``, ``"cuda"``: see :mod:`ember.backend.fusion.executors`),
    #: or ``None``: a fusion device over it replays the recorded ops.
    fusion_target: str | None = None

    def check_dtype(self, dtype: np.dtype) -> None:
        """Raises :class:`~ember.errors.DTypeError` (naming the fix) if this backend
        cannot hold tensors of ``dtype``. A lazy decorator asks it when an op is
        recorded, so the error comes where eager execution would raise it."""

    # ------------------------------------------------------------------ data boundary
    @abstractmethod
    def from_numpy(self, array: np.ndarray) -> Primitive:
        """A primitive holding a copy of ``array`` (whose dtype is one of ``DType.np``)."""

    @abstractmethod
    def to_numpy(self, x: Primitive) -> np.ndarray:
        """The values of ``x`` as a numpy array (may share memory: callers copy)."""

    # ------------------------------------------------------------------ creation
    @abstractmethod
    def full(self, shape: tuple[int, ...], value: Scalar, dtype: DType) -> Primitive:
        """A tensor of ``shape`` filled with ``value``."""

    @abstractmethod
    def arange(self, start: int, stop: int, step: int, dtype: DType) -> Primitive:
        """The rank-1 tensor ``start, start + step, ...`` below ``stop``."""

    @abstractmethod
    def random(
        self, shape: tuple[int, ...], distribution: Distribution, dtype: DType, key: int, counter: int
    ) -> Primitive:
        """The draw of ``distribution`` at Philox key ``key`` and first block ``counter``
        (a pure function of them: see :mod:`ember.backend.philox` for the exact
        mapping every backend implements; the device's generator picks the counters)."""

    def sync(self) -> None:
        """Wait until every queued op has finished (eager backends return at once)."""

    # ------------------------------------------------------------------ elementwise
    @abstractmethod
    def unary(self, op: UnaryOp, x: Primitive) -> Primitive:
        """An elementwise op of :class:`UnaryOp`. ``is_*`` ops give bool."""

    @abstractmethod
    def binary(self, op: BinaryOp, a: Primitive, b: Primitive | Scalar) -> Primitive:
        """An elementwise op of :class:`BinaryOp` with numpy broadcasting.

        ``b`` is a primitive of ``a``'s dtype or a Python scalar. Comparisons give bool;
        ``div`` and ``pow`` are used on floats only; ``remainder`` follows Python's
        sign rule (the sign of the divisor).
        """

    @abstractmethod
    def where(self, cond: Primitive, a: Primitive | Scalar, b: Primitive | Scalar) -> Primitive:
        """``a`` where ``cond`` (bool) holds, else ``b``; the three broadcast together.

        At least one of ``a`` and ``b`` is a primitive; the result has its dtype.
        """

    @abstractmethod
    def clamp(self, x: Primitive, low: Scalar | None, high: Scalar | None) -> Primitive:
        """``x`` limited to ``[low, high]`` (either bound may be ``None``)."""

    @abstractmethod
    def cast(self, x: Primitive, dtype: DType) -> Primitive:
        """``x`` converted to ``dtype`` (floats to ints truncate; nonzero to bool is True)."""

    # ------------------------------------------------------------------ matmul
    @abstractmethod
    def matmul(self, a: Primitive, b: Primitive) -> Primitive:
        """Batched matrix product of rank >= 2 operands, batch dims broadcast."""

    # ------------------------------------------------------------------ reductions
    @abstractmethod
    def reduce(self, op: ReduceOp, x: Primitive, dim: int) -> Primitive:
        """An op of :class:`ReduceOp` along ``dim``, which is kept with size 1."""

    @abstractmethod
    def arg_reduce(self, op: ArgReduceOp, x: Primitive, dim: int) -> Primitive:
        """``argmax``/``argmin`` along ``dim`` (kept, size 1) as int64; first index on ties."""

    @abstractmethod
    def cumulative(self, op: CumulativeOp, x: Primitive, dim: int) -> Primitive:
        """An inclusive scan of :class:`CumulativeOp` along ``dim``."""

    @abstractmethod
    def argsort(self, x: Primitive, dim: int, descending: bool) -> Primitive:
        """Indices (int64) that sort ``x`` along ``dim``; stable; NaN sorts as largest."""

    # ------------------------------------------------------------------ layout
    @abstractmethod
    def reshape(self, x: Primitive, shape: tuple[int, ...]) -> Primitive:
        """The same values in row-major order with a new shape of equal size."""

    @abstractmethod
    def permute(self, x: Primitive, axes: tuple[int, ...]) -> Primitive:
        """Dimensions reordered: result dim ``i`` is input dim ``axes[i]``."""

    @abstractmethod
    def flip(self, x: Primitive, axes: tuple[int, ...]) -> Primitive:
        """Elements reversed along each of ``axes``."""

    @abstractmethod
    def expand(self, x: Primitive, shape: tuple[int, ...]) -> Primitive:
        """``x`` broadcast to ``shape`` (numpy's rules)."""

    @abstractmethod
    def slice(self, x: Primitive, slices: Slices) -> Primitive:
        """``x[start:stop:step, ...]`` with one normalised ``(start, stop, step)`` per dim.

        ``step`` may be negative (as in Python); bounds are already clipped.
        """

    @abstractmethod
    def slice_assign(self, x: Primitive, slices: Slices, value: Primitive) -> Primitive:
        """A copy of ``x`` with the region ``slices`` replaced by ``value`` (its shape)."""

    @abstractmethod
    def cat(self, xs: Sequence[Primitive], dim: int) -> Primitive:
        """Concatenation along ``dim`` of tensors equal in every other dim."""

    # ------------------------------------------------------------------ indexing
    @abstractmethod
    def gather(self, x: Primitive, dim: int, indices: Primitive) -> Primitive:
        """``out[..., i, ...] = x[..., indices[..., i, ...], ...]`` along ``dim``.

        ``indices`` is int64 with ``x``'s rank; its other dims are at most ``x``'s.
        """

    @abstractmethod
    def scatter_add(self, x: Primitive, dim: int, indices: Primitive, values: Primitive) -> Primitive:
        """A copy of ``x`` with ``values`` added at ``indices`` along ``dim`` (the inverse
        of :meth:`gather`; repeated indices accumulate)."""

    @abstractmethod
    def select(self, x: Primitive, dim: int, indices: Primitive) -> Primitive:
        """The slices of ``x`` at the rank-1 int64 ``indices`` along ``dim``."""

    @abstractmethod
    def select_add(self, x: Primitive, dim: int, indices: Primitive, values: Primitive) -> Primitive:
        """A copy of ``x`` with ``values`` added to the slices at ``indices`` along ``dim``."""

    @abstractmethod
    def argwhere(self, x: Primitive) -> Primitive:
        """The int64 ``[n, rank]`` coordinates of the true elements of bool ``x``."""

    # ------------------------------------------------------------------ linalg
    def linalg(self, op: LinalgOp, inputs: tuple[Primitive, ...], options: tuple = ()) -> tuple[Primitive, ...]:
        """A matrix decomposition or solve of :class:`LinalgOp` (batched over leading
        dims; options and outputs as :mod:`ember.backend.linalg_host`'s kernels).

        This default runs on the host: the operands are copied to numpy
        (device -> host), LAPACK runs there, and the results are copied back
        (host -> device). Flex overrides it to call the kernels on its arrays directly.
        """
        arrays = tuple(self.to_numpy(x) for x in inputs)
        outs = linalg_host.run(op, arrays, options)
        # (np.ascontiguousarray would make a 0-d result, a determinant, 1-d.)
        return tuple(self.from_numpy(np.require(out, requirements="C")) for out in outs)

    # ------------------------------------------------------------------ complex and spectral
    # Defaults run on the host through numpy (a backend that holds complex tensors and has
    # its own kernels overrides them); a lazy backend gets a sync point here.

    def complex_unary(self, op: ComplexOp, x: Primitive) -> Primitive:
        """An op of :class:`ComplexOp` on a complex ``x``."""
        return self.from_numpy(host_complex_unary(op, self.to_numpy(x)))

    def complex(self, real: Primitive, imag: Primitive) -> Primitive:
        """``real + i imag`` from two float tensors of one dtype and shape (float32 gives
        complex64, float64 complex128)."""
        return self.from_numpy(host_complex(self.to_numpy(real), self.to_numpy(imag)))

    def fft(self, op: FftOp, x: Primitive, sizes: tuple[int, ...], dims: tuple[int, ...], norm: str) -> Primitive:
        """The transform ``op`` over ``dims`` (distinct, in order), each first cropped or
        zero-padded to its signal length in ``sizes`` (for ``irfft``, the last is the
        real output's length), scaled by ``norm`` (``"backward"``, ``"ortho"`` or
        ``"forward"``, as numpy and PyTorch). ``fft``/``ifft``/``irfft`` take complex
        ``x``, ``rfft`` a float32/float64 one; the precision is kept."""
        return self.from_numpy(host_fft(op, self.to_numpy(x), sizes, dims, norm))

    # ------------------------------------------------------------------ fused (optional)
    # One method per ember.backend.ops.FusedOp (plus the backward kernels of
    # FUSED_BACKWARD_KERNELS). Each returns NotImplemented unless the backend has a faster
    # kernel; callers then run the op's composite (ember.backend.composites: its one
    # definition, over the primitives).

    def relu(self, x: Primitive) -> Primitive:
        """``max(x, 0)``."""
        return NotImplemented

    def relu_backward(self, out: Primitive, grad: Primitive) -> Primitive:
        """``grad`` where ``out > 0``, else ``0`` (``out`` the output of :meth:`relu`, of
        ``grad``'s shape): the gradient of :meth:`relu`."""
        return NotImplemented

    def sigmoid(self, x: Primitive) -> Primitive:
        """``1 / (1 + exp(-x))``."""
        return NotImplemented

    def softmax(self, x: Primitive, dim: int) -> Primitive:
        """``exp(x - max) / sum(exp(x - max))`` along ``dim``."""
        return NotImplemented

    def log_softmax(self, x: Primitive, dim: int) -> Primitive:
        """``x - max - log(sum(exp(x - max)))`` along ``dim``."""
        return NotImplemented

    def linear(self, x: Primitive, weight: Primitive, bias: Primitive | None) -> Primitive:
        """``x @ weight + bias`` with ``x`` of rank >= 2 ``[..., d_in]`` (the tensor layer
        makes a vector one row) and ``weight`` of shape ``[d_in, d_out]``."""
        return NotImplemented

    def quantized_linear(
        self,
        x: Primitive,
        values: Primitive,
        scales: Primitive,
        zero_points: Primitive | None,
        bias: Primitive | None,
        input_scale: Primitive | None,
        value: str,
        group: int,
        activations: str,
        activation: str = "",
    ) -> Primitive:
        """``x @ dequantize(weight).T + bias`` for a quantized weight ``[d_out, d_in]``
        (``ember.tensor.quant``'s layout): ``values`` int8/uint8 ``[d_out, d_in]`` or int4
        packed ``[d_out, d_in / 2]`` (``value`` is ``"int8"`` or ``"int4"``), float32 ``scales``
        and uint8 ``zero_points`` (``None`` when symmetric) of shape ``[d_out, d_in / group]``
        (``[1, 1]`` per tensor). ``activations``: ``""`` (weight-only), ``"dynamic"`` (each
        row of ``x`` quantized to int8 with its own scale) or ``"static"`` (one scale,
        ``input_scale`` ``[1]``). ``activation`` names a fused op applied to the result
        (``""``: none; a compiled plan passes ``"relu"`` where the wrapped backend takes it,
        :mod:`ember.backend.fusion.quant_epilogue`). A kernel never materialises the float weight."""
        return NotImplemented

    def quantized_conv(
        self,
        x: Primitive,
        values: Primitive,
        scales: Primitive,
        zero_points: Primitive | None,
        bias: Primitive | None,
        input_scale: Primitive | None,
        value: str,
        group: int,
        activations: str,
        kernel: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[tuple[int, int], ...],
        dilation: tuple[int, ...],
        out: tuple[int, ...],
        groups: int,
        activation: str = "",
    ) -> Primitive:
        """The convolution of float32 ``x`` ``[N, C, *spatial]`` (1-3 spatial dims) with a
        quantized weight stored as the matrix ``[C_out, C / groups * prod(kernel)]`` (as
        :meth:`quantized_linear` takes it): ``[N, C_out, *out]``. ``padding`` holds a
        ``(before, after)`` pair per spatial dim, ``out`` the output's spatial size. An
        activation scheme quantizes each output position's block of inputs as
        :meth:`quantized_linear` quantizes a row; ``activation`` as there. A kernel never
        materialises the float weight."""
        return NotImplemented

    def linear_backward(
        self, x: Primitive, weight: Primitive, grad: Primitive, need_x: bool, need_weight: bool, need_bias: bool
    ) -> tuple[Primitive | None, Primitive | None, Primitive | None]:
        """Gradients of :meth:`linear` for ``x``, ``weight`` and ``bias`` (``None`` where not needed)."""
        return NotImplemented

    def adam_step_many(
        self,
        params: list[Primitive],
        grads: list[Primitive],
        moments_1: list[Primitive] | None,
        moments_2: list[Primitive] | None,
        max_moments_2: list[Primitive] | None,
        *,
        lr: float,
        beta_1: float,
        beta_2: float,
        epsilon: float,
        weight_decay: float,
        decoupled: bool,
        amsgrad: bool,
        time: int,
    ) -> tuple[list[Primitive], list[Primitive], list[Primitive], list[Primitive] | None]:
        """One Adam/AdamW update of several tensors (one tensor: lists of one), all at
        step ``time`` (from 1) with the same options; the composite, which defines the
        math and its order of operations, is ``ember.backend.composites.optim.adam_step_many``.
        Moments are ``None`` on the first step; ``max_moments_2`` is ``None`` unless
        ``amsgrad`` and a maximum was kept. Returns the new parameters and moments
        (the maxima ``None`` unless ``amsgrad``)."""
        return NotImplemented

    def attention(
        self,
        query: Primitive,
        key: Primitive,
        value: Primitive,
        mask: Primitive | None,
        bias: Primitive | None,
        fill: float,
        scale: float,
        causal: bool,
        keep: Primitive | None,
    ) -> tuple[Primitive, Primitive]:
        """Scaled dot-product attention: ``probs = softmax(scale * q @ k^T + bias)`` over
        the last dim, where ``mask`` (bool, true hides a key) and, when ``causal``, the
        keys after each query (top-left aligned) are set to ``fill`` first; a row whose
        keys are all hidden gets zero weights. Returns ``((probs * keep) @ value, probs)``.

        ``query`` ``[..., L, E]``, ``key`` ``[..., S, E]``, ``value`` ``[..., S, Ev]`` share
        their batch dims; ``mask``, ``bias`` and ``keep`` (dropout's scaled keep mask) are
        ``[..., L, S]`` or ``None``. All floats share one dtype."""
        return NotImplemented

    def attention_backward(
        self,
        query: Primitive,
        key: Primitive,
        value: Primitive,
        probs: Primitive,
        mask: Primitive | None,
        keep: Primitive | None,
        grad: Primitive,
        scale: float,
        causal: bool,
        need_query: bool,
        need_key: bool,
        need_value: bool,
        need_scores: bool,
    ) -> tuple[Primitive | None, Primitive | None, Primitive | None, Primitive | None]:
        """Gradients of :meth:`attention`'s context (given its gradient ``grad``) for the
        query, key and value, and for the scores (``scale * q @ k^T + bias``, zero at
        hidden keys; the bias's gradient before unbroadcasting), ``None`` where not
        needed. ``probs`` is the forward's weights."""
        return NotImplemented

    def grid_sample(
        self, x: Primitive, grid: Primitive, mode: str, padding_mode: str, align_corners: bool
    ) -> Primitive:
        """``x`` ``[N, C, *spatial]`` (2 or 3 spatial dims) sampled at the normalised
        points ``grid`` ``[N, *out, D]`` (x first), ``mode`` ``"bilinear"`` or
        ``"nearest"``, ``padding_mode`` ``"zeros"``, ``"border"`` or ``"reflection"``:
        ``[N, C, *out]`` (``torch.nn.functional.grid_sample``'s formulas)."""
        return NotImplemented

    def stft_frames(
        self, x: Primitive, window: Primitive | None, n_fft: int, hop: int, pad: int, pad_mode: str
    ) -> Primitive:
        """The windowed frames ``[..., frames, n_fft]`` of ``x`` ``[..., L]``: ``x`` padded
        by ``pad`` on both sides in ``pad_mode`` (``"reflect"``, ``"replicate"`` or
        ``"circular"``), an ``n_fft``-point frame every ``hop`` samples, each multiplied by
        ``window`` ``[n_fft]`` (``None``: ones). ``torch.stft``'s framing."""
        return NotImplemented

    def grid_sample_backward(
        self,
        grad: Primitive,
        x: Primitive,
        grid: Primitive,
        mode: str,
        padding_mode: str,
        align_corners: bool,
        need_x: bool,
        need_grid: bool,
    ) -> tuple[Primitive | None, Primitive | None]:
        """Gradients of :meth:`grid_sample` for ``x`` and ``grid`` (``None`` where not needed)."""
        return NotImplemented

    def mse_loss(self, pred: Primitive, target: Primitive, mean: bool) -> Primitive:
        """``sum((pred - target)^2)``, divided by the element count when ``mean``; shape ``[1]``.
        ``pred`` and ``target`` have one shape."""
        return NotImplemented

    def gelu(self, x: Primitive) -> Primitive:
        """The exact GELU ``x * Phi(x)`` (``Phi`` the standard normal CDF)."""
        return NotImplemented

    def gelu_backward(self, x: Primitive, grad: Primitive) -> Primitive:
        """``grad * (Phi(x) + x * phi(x))``: the gradient of :meth:`gelu` at ``x``."""
        return NotImplemented

    def lstm_cell(self, gates: Primitive, c: Primitive) -> tuple[Primitive, Primitive]:
        """One LSTM state update: ``gates`` ``[..., 4H]`` holds the pre-activations of the
        input, forget, cell and output gates (PyTorch's order) and ``c`` ``[..., H]`` the
        cell state, with the same leading dims. ``i, f, o = sigmoid(...)``, ``g =
        tanh(...)``, ``c' = f c + i g``, ``h' = o tanh(c')``; returns ``(h', c')``."""
        return NotImplemented

    def lstm_cell_backward(
        self, gates: Primitive, c: Primitive, c_new: Primitive, grad_h: Primitive | None, grad_c: Primitive | None
    ) -> tuple[Primitive, Primitive]:
        """Gradients of :meth:`lstm_cell` for ``gates`` and ``c`` from the gradients of
        ``h'`` and ``c'`` (either may be ``None``: no gradient reached it) and the
        forward's inputs and ``c_new``."""
        return NotImplemented

    def gru_cell(self, xp: Primitive, hp: Primitive, h: Primitive) -> Primitive:
        """One GRU state update (PyTorch's ``reset_after`` form) from the projections
        ``xp = x W_ih + b_ih`` and ``hp = h W_hh + b_hh`` (each ``[..., 3H]``: reset, update,
        new) and the state ``h`` ``[..., H]``, all with the same leading dims: ``r, z =
        sigmoid(xp + hp)``, ``n = tanh(xp_n + r hp_n)``, ``h' = n + z (h - n)``."""
        return NotImplemented

    def gru_cell_backward(
        self, xp: Primitive, hp: Primitive, h: Primitive, grad: Primitive
    ) -> tuple[Primitive, Primitive, Primitive]:
        """Gradients of :meth:`gru_cell` for ``xp``, ``hp`` and ``h`` from the gradient of ``h'``."""
        return NotImplemented

    def lstm_sequence(
        self, proj: Primitive, w_hh: Primitive, h0: Primitive, c0: Primitive, valid: Primitive | None, reverse: bool
    ) -> tuple[Primitive, ...]:
        """One LSTM direction over a whole sequence (time-major): per step ``t`` (from
        last to first with ``reverse``) ``z_t = proj[t] + h @ w_hh`` and :meth:`lstm_cell`.
        ``proj`` ``[S, B, 4H]`` is the input projection (``x W_ih + b_ih + b_hh``),
        ``w_hh`` ``[H, 4H]`` (``[in, out]``), ``h0``/``c0`` ``[B, H]``, ``valid`` ``None``
        or bool ``[S, B, 1]`` (a padded step keeps the states and outputs zeros).
        Returns ``(y [S, B, H], h_n, c_n, h_in, c_in, z)``: the outputs, the final
        states, and for the backward the states entering each step ``[S, B, H]`` and
        the gates' pre-activations ``[S, B, 4H]``."""
        return NotImplemented

    def lstm_sequence_backward(
        self,
        w_hh: Primitive,
        valid: Primitive | None,
        reverse: bool,
        h_in: Primitive,
        c_in: Primitive,
        c_n: Primitive,
        z: Primitive,
        grad_y: Primitive | None,
        grad_h: Primitive | None,
        grad_c: Primitive | None,
    ) -> tuple[Primitive, Primitive, Primitive, Primitive]:
        """Gradients of :meth:`lstm_sequence` ``(d proj, d w_hh, d h0, d c0)`` from those
        of ``y``, ``h_n`` and ``c_n`` (each may be ``None``); ``d w_hh`` is one product
        ``h_in^T d z`` over all steps."""
        return NotImplemented

    def gru_sequence(
        self,
        proj: Primitive,
        w_hh: Primitive,
        b_hh: Primitive | None,
        h0: Primitive,
        valid: Primitive | None,
        reverse: bool,
    ) -> tuple[Primitive, ...]:
        """One GRU direction (``reset_after``) over a whole sequence: per step ``hp_t = h
        @ w_hh + b_hh`` and :meth:`gru_cell` of ``(proj[t], hp_t, h)``. ``proj`` ``[S, B,
        3H]`` is ``x W_ih + b_ih``, ``w_hh`` ``[H, 3H]``, ``b_hh`` ``[3H]`` or ``None``,
        ``h0`` ``[B, H]``, ``valid`` as :meth:`lstm_sequence`. Returns ``(y, h_n, h_in,
        hp)``: the outputs, the final state, the states entering each step and the
        hidden projections ``[S, B, 3H]``."""
        return NotImplemented

    def gru_sequence_backward(
        self,
        w_hh: Primitive,
        valid: Primitive | None,
        reverse: bool,
        proj: Primitive,
        h_in: Primitive,
        hp: Primitive,
        grad_y: Primitive | None,
        grad_h: Primitive | None,
    ) -> tuple[Primitive, Primitive, Primitive, Primitive]:
        """Gradients of :meth:`gru_sequence` ``(d proj, d w_hh, d b_hh, d h0)`` from those
        of ``y`` and ``h_n`` (either may be ``None``)."""
        return NotImplemented

    def layer_norm(
        self, x: Primitive, gamma: Primitive | None, beta: Primitive | None, epsilon: float
    ) -> tuple[Primitive, Primitive, Primitive]:
        """Normalisation over the last dim: ``(x - mean) * rstd * gamma + beta`` with
        ``rstd = 1 / sqrt(var + epsilon)`` (biased variance); ``gamma``/``beta`` ``[D]`` or
        ``None``. Returns ``(out, mean, rstd)``, the last two ``[..., 1]``."""
        return NotImplemented

    def layer_norm_backward(
        self,
        x: Primitive,
        gamma: Primitive | None,
        mean: Primitive,
        rstd: Primitive,
        grad: Primitive,
        need_x: bool,
        need_gamma: bool,
        need_beta: bool,
    ) -> tuple[Primitive | None, Primitive | None, Primitive | None]:
        """Gradients of :meth:`layer_norm` for ``x``, ``gamma`` and ``beta`` (``None`` where
        not needed), from the forward's ``mean`` and ``rstd``."""
        return NotImplemented

    def rms_norm(self, x: Primitive, gamma: Primitive | None, epsilon: float) -> tuple[Primitive, Primitive]:
        """Root-mean-square normalisation over the last dim: ``x * rstd * gamma`` with
        ``rstd = 1 / sqrt(mean(x^2) + epsilon)``; ``gamma`` ``[D]`` or ``None``. Returns
        ``(out, rstd)``, the last ``[..., 1]``."""
        return NotImplemented

    def rms_norm_backward(
        self, x: Primitive, gamma: Primitive | None, rstd: Primitive, grad: Primitive, need_x: bool, need_gamma: bool
    ) -> tuple[Primitive | None, Primitive | None]:
        """Gradients of :meth:`rms_norm` for ``x`` and ``gamma`` (``None`` where not
        needed), from the forward's ``rstd``."""
        return NotImplemented

    def cross_entropy(self, logits: Primitive, targets: Primitive) -> tuple[Primitive, Primitive]:
        """Cross entropy of float ``logits`` ``[N, C]`` against int64 class ``targets``
        ``[N]`` (each in ``[0, C)``): ``(losses [N], log_probs [N, C])`` with
        ``losses[i] = -log_softmax(logits)[i, targets[i]]``."""
        return NotImplemented

    def cross_entropy_backward(self, log_probs: Primitive, targets: Primitive, grad: Primitive) -> Primitive:
        """The gradient for the logits of :meth:`cross_entropy` given the gradient
        ``grad`` ``[N]`` of the losses: ``(softmax - one_hot(targets)) * grad[:, None]``."""
        return NotImplemented


_HOST_COMPLEX: dict[ComplexOp, Any] = {
    ComplexOp.REAL: np.real,
    ComplexOp.IMAG: np.imag,
    ComplexOp.CONJ: np.conjugate,
    ComplexOp.ABS: np.abs,
    ComplexOp.ANGLE: np.angle,
}
_HOST_FFT_1D: dict[FftOp, Any] = {
    FftOp.FFT: np.fft.fft,
    FftOp.IFFT: np.fft.ifft,
    FftOp.RFFT: np.fft.rfft,
    FftOp.IRFFT: np.fft.irfft,
}
_HOST_FFT_ND: dict[FftOp, Any] = {
    FftOp.FFT: np.fft.fftn,
    FftOp.IFFT: np.fft.ifftn,
    FftOp.RFFT: np.fft.rfftn,
    FftOp.IRFFT: np.fft.irfftn,
}


def host_complex_unary(op: ComplexOp, x: np.ndarray) -> np.ndarray:
    """:meth:`Backend.complex_unary` on a numpy array (a new contiguous array)."""
    return np.ascontiguousarray(_HOST_COMPLEX[op](x))


def host_complex(real: np.ndarray, imag: np.ndarray) -> np.ndarray:
    """:meth:`Backend.complex` on numpy arrays."""
    out = np.empty(real.shape, np.complex128 if real.dtype == np.float64 else np.complex64)
    out.real = real
    out.imag = imag
    return out


def host_fft(op: FftOp, x: np.ndarray, sizes: tuple[int, ...], dims: tuple[int, ...], norm: str) -> np.ndarray:
    """:meth:`Backend.fft` on a numpy array: one pocketfft call."""
    if len(dims) == 1:
        return _HOST_FFT_1D[op](x, sizes[0], dims[0], norm)
    return _HOST_FFT_ND[op](x, sizes, dims, norm)
