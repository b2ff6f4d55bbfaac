"""``GradScaler``: dynamic loss scaling for float16 training (PyTorch's ``torch.amp.GradScaler``).

float16 gradients underflow to zero below ~6e-8 and overflow above 65504. The scaler
multiplies the loss by a large factor before backward, so that small gradients
survive, divides the gradients by it before the optimizer step, and adapts the
factor: a step whose gradients hold an inf or a NaN is skipped and the scale shrinks
(``backoff_factor``); after ``growth_interval`` clean steps in a row it grows
(``growth_factor``). Checking the gradients reads one value per step (a sync point,
as in PyTorch); under ``ember.compile`` such a step runs eagerly.

>>> scaler = GradScaler()
>>> grads = GradientsParams.from_grads(scaler.scale(loss).backward(), model)  # doctest: +SKIP
>>> model = scaler.step(optim, lr, model, grads)                            # doctest: +SKIP
>>> scaler.update()                                                         # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

from ember.errors import ConfigError
from ember.module import Module
from ember.optim import GradientsParams
from ember.tensor import Tensor


class GradScaler:
    """Dynamic loss scaling; see the module docstring. ``enabled=False`` makes every
    method a pass-through (so one training loop serves float32 and float16)."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        if not (init_scale > 0 and math.isfinite(init_scale)):
            raise ConfigError(f"ember: GradScaler: init_scale must be a finite number > 0, got {init_scale}")
        if not growth_factor > 1.0:
            raise ConfigError(f"ember: GradScaler: growth_factor must be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ConfigError(f"ember: GradScaler: backoff_factor must lie in (0, 1), got {backoff_factor}")
        if not (isinstance(growth_interval, int) and growth_interval >= 1):
            raise ConfigError(f"ember: GradScaler: growth_interval must be an int >= 1, got {growth_interval!r}")
        self._scale = float(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = growth_interval
        self._enabled = bool(enabled)
        self._growth_tracker = 0
        self._found_inf: bool | None = None  # of the step in progress (None: not unscaled yet)
        self._unscaled: GradientsParams | None = None
        self.skipped_steps = 0

    # ------------------------------------------------------------------ the step
    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def scale(self, loss: Tensor) -> Tensor:
        """``loss`` times the scale (float32; the loss itself when disabled)."""
        if not self._enabled:
            return loss
        if not isinstance(loss, Tensor):
            raise ConfigError(f"ember: GradScaler.scale: expected a loss Tensor, got {type(loss).__name__}")
        return loss.float().mul_scalar(self._scale)

    def unscale(self, grads: GradientsParams) -> GradientsParams:
        """The gradients divided by the scale (real ones in float32, complex ones in
        their own dtype), and whether any of them is inf or NaN (a complex value where
        either part is, as PyTorch checks a complex gradient through its real view),
        remembered for :meth:`step` and :meth:`update` (one sync point). Call it
        before clipping; :meth:`step` then does not unscale again."""
        if not isinstance(grads, GradientsParams):
            raise ConfigError(f"ember: GradScaler.unscale: expected GradientsParams, got {type(grads).__name__}")
        if not self._enabled:
            return grads
        if self._unscaled is not None:
            raise ConfigError("ember: GradScaler.unscale: already called for this step; call update() after step()")
        inverse = 1.0 / self._scale
        out = GradientsParams()
        bad = None
        for pid, g in grads.items():
            if g.dtype.is_float:
                u = g.float().mul_scalar(inverse)
            elif g.dtype.is_complex:
                u = g.mul_scalar(inverse)
            else:
                u = g
            out._grads[pid] = u
            flag = u.is_finite().all().bool_not()
            bad = flag if bad is None else bad.bool_or(flag)
        out._sources = dict(grads._sources)
        self._found_inf = bool(bad.into_scalar()) if bad is not None else False
        self._unscaled = out
        return out

    def step(self, optim: Any, lr: float, model: Module, grads: GradientsParams) -> Module:
        """``optim.step(lr, model, unscaled grads)``, or ``model`` unchanged when the
        gradients hold an inf or a NaN (the step is skipped)."""
        if not self._enabled:
            return optim.step(lr, model, grads)
        unscaled = self._unscaled if self._unscaled is not None else self.unscale(grads)
        if self._found_inf:
            self.skipped_steps += 1
            return model
        return optim.step(lr, model, unscaled)

    def update(self, new_scale: float | None = None) -> None:
        """Adapts the scale after a step (or sets ``new_scale``); starts the next step."""
        if not self._enabled:
            return
        if new_scale is not None:
            if not (new_scale > 0 and math.isfinite(new_scale)):
                raise ConfigError(f"ember: GradScaler.update: new_scale must be a finite number > 0, got {new_scale}")
            self._scale = float(new_scale)
        elif self._found_inf is None:
            raise ConfigError(
                "ember: GradScaler.update: no step was taken since the last update; call "
                "scaler.step(optim, lr, model, grads) (or scaler.unscale(grads)) first"
            )
        elif self._found_inf:
            self._scale *= self.backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._scale *= self.growth_factor
                self._growth_tracker = 0
        self._found_inf = None
        self._unscaled = None

    def found_inf(self) -> bool | None:
        """Whether the current step's gradients held an inf or a NaN (``None`` before
        :meth:`unscale`/:meth:`step`)."""
        return self._found_inf

    # ------------------------------------------------------------------ records
    def state_dict(self) -> dict[str, Any]:
        """The scaler's state (saved with Learner checkpoints)."""
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state: dict[str, Any]) -> GradScaler:
        if not state:
            if self._enabled:
                raise ConfigError("ember: GradScaler.load_state_dict: the state is empty (saved by a disabled scaler)")
            return self
        try:
            self._scale = float(state["scale"])
            self.growth_factor = float(state["growth_factor"])
            self.backoff_factor = float(state["backoff_factor"])
            self.growth_interval = int(state["growth_interval"])
            self._growth_tracker = int(state["growth_tracker"])
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigError(f"ember: GradScaler.load_state_dict: not a GradScaler state ({error})") from None
        return self

    def __repr__(self) -> str:
        if not self._enabled:
            return "GradScaler(enabled=False)"
        return f"GradScaler(scale={self._scale:g}, growth_tracker={self._growth_tracker}/{self.growth_interval})"
