"""Muon: momentum SGD whose update is orthogonalised by a Newton-Schulz iteration
(Keller Jordan, 2024; "Muon is Scalable for LLM Training", arXiv:2502.16982)."""

from __future__ import annotations

import dataclasses
import enum
import math

from ember.errors import ConfigError
from ember.optim.base import OptimizerConfig, OptimizerState, check_range
from ember.optim.momentum import velocity
from ember.optim.weight_decay import decoupled_decay
from ember.tensor import Tensor


class AdjustLrFn(enum.Enum):
    """How Muon scales the learning rate by the weight's shape (``fan_in``, ``fan_out``).

    ``ORIGINAL``: ``lr * sqrt(max(1, fan_out / fan_in))`` (Keller Jordan's rule).
    ``MATCH_RMS_ADAMW``: ``lr * 0.2 * sqrt(max(fan_in, fan_out))`` (Moonshot's rule, so
    that AdamW's learning rate and weight decay can be reused).
    """

    ORIGINAL = "original"
    MATCH_RMS_ADAMW = "match_rms_adamw"

    def ratio(self, fan_in: int, fan_out: int) -> float:
        if self is AdjustLrFn.ORIGINAL:
            return math.sqrt(max(1.0, fan_out / fan_in))
        return 0.2 * math.sqrt(max(fan_in, fan_out))


@dataclasses.dataclass(slots=True)
class MuonState(OptimizerState):
    """The momentum buffer."""

    momentum: Tensor


def zeropower_via_newton_schulz(
    g: Tensor, coefficients: tuple[float, float, float], steps: int, epsilon: float
) -> Tensor:
    """An approximately orthogonal matrix with ``g``'s singular vectors (``U S' Vᵀ``,
    ``S'`` near 1): ``X = g / max(‖g‖_F, epsilon)``, then ``steps`` times
    ``A = X Xᵀ``, ``X = a X + (b A + c A²) X`` on the wide orientation of ``g``."""
    a, b, c = coefficients
    tall = g.dims()[0] > g.dims()[1]
    x = g.transpose() if tall else g
    x = x.div(x.square().sum().sqrt().clamp_min(epsilon))
    for _ in range(steps):
        gram = x.matmul(x.transpose())
        poly = gram.mul_scalar(b).add(gram.matmul(gram).mul_scalar(c))
        x = x.mul_scalar(a).add(poly.matmul(x))
    return x.transpose() if tall else x


class MuonConfig(OptimizerConfig):
    """Muon, for the 2-D weights of hidden layers, with Burn's defaults (momentum 0.95,
    Nesterov, Keller Jordan's quintic coefficients ``(3.4445, -4.775, 2.0315)``, 5
    steps, ``epsilon=1e-7``, no weight decay). Other parameters (biases, norms,
    embeddings) need another optimizer: a step on a non-2-D parameter raises a
    ConfigError, as Burn refuses them too.

    The update: momentum (``v = g`` first, then ``v = momentum * v +
    (1 - dampening) * g``; Nesterov uses ``g + momentum * v``), Newton-Schulz
    orthogonalisation of that update ``O``, then ``w = w (1 - lr weight_decay) - lr' O``
    with ``lr'`` the shape-adjusted rate (:class:`AdjustLrFn`).

    Shapes: ember's weights are ``[d_input, d_output]`` (``y = x @ w``), so
    ``fan_in, fan_out = shape``. Keller Jordan's and ``torch.optim.Muon``'s rule
    ``sqrt(max(1, rows / cols))`` is written for PyTorch's ``[out, in]`` layout, i.e.
    ``fan_out / fan_in``; ember keeps that meaning (Burn applies ``shape[0] / shape[1]``
    to its ``[d_input, d_output]`` layout, i.e. ``fan_in / fan_out``). The scalar
    factor between this SGD-style momentum and PyTorch's exponential average cancels in
    the normalisation, so with ``dampening=0`` the trajectory is PyTorch's (in float64;
    PyTorch runs the iteration in bfloat16).

    >>> optim = MuonConfig().init().with_group(ParamGroup.contains("bias"), AdamWConfig())  # doctest: +SKIP
    """

    momentum: float = 0.95
    dampening: float = 0.0
    nesterov: bool = True
    weight_decay: float = 0.0
    ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315)
    ns_steps: int = 5
    epsilon: float = 1e-7
    adjust_lr_fn: AdjustLrFn = AdjustLrFn.ORIGINAL

    state_type = MuonState

    def validate(self) -> None:
        check_range("MuonConfig", "momentum", self.momentum, 0.0, 1.0, high_open=True)
        check_range("MuonConfig", "dampening", self.dampening, 0.0, 1.0)
        check_range("MuonConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)
        check_range("MuonConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("MuonConfig", "ns_steps", self.ns_steps, 1, 100, high_open=True)
        if not all(math.isfinite(c) for c in self.ns_coefficients):
            raise ConfigError(f"ember: MuonConfig: ns_coefficients must be finite numbers, got {self.ns_coefficients}")

    def apply_single(self, lr: float, param: Tensor, grad: Tensor, state: MuonState | None) -> tuple[Tensor, MuonState]:
        if len(param.dims()) != 2:
            raise ConfigError(
                f"ember: Muon: optimizes 2-D weight matrices only, got a parameter of shape {param.dims()}; "
                "give biases, norms and embeddings another optimizer with a group, e.g. "
                "MuonConfig().init().with_group(ParamGroup.contains('bias'), AdamWConfig())"
            )
        buffer = velocity(None if state is None else state.momentum, grad, self.momentum, self.dampening)
        update = grad.add(buffer.mul_scalar(self.momentum)) if self.nesterov else buffer
        coefficients = tuple(float(c) for c in self.ns_coefficients)
        update = zeropower_via_newton_schulz(update, coefficients, self.ns_steps, self.epsilon)  # type: ignore[arg-type]
        fan_in, fan_out = param.dims()
        adjusted_lr = lr * self.adjust_lr_fn.ratio(fan_in, fan_out)
        param = decoupled_decay(param, lr, self.weight_decay)
        return param.sub(update.mul_scalar(adjusted_lr)), MuonState(buffer)
