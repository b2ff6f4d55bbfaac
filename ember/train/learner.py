"""``Learner``: the model, its optimizer and its learning-rate schedule (Burn's
``Learner``); ``fit`` trains it with a :class:`~ember.train.SupervisedTraining` setup."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, cast

from ember.amp import GradScaler, Precision, autocast
from ember.errors import ConfigError, GraphError
from ember.module import Module
from ember.optim import GradientsParams
from ember.optim.lr_scheduler import ConstantLr
from ember.train.compiled_steps import CompiledSteps
from ember.train.output import TrainOutput
from ember.train.step import TrainStep, ValidStep

if TYPE_CHECKING:
    from ember.data import DataLoader
    from ember.train.result import TrainingResult
    from ember.train.training import SupervisedTraining


#: When the learning-rate scheduler steps: each training iteration, or each epoch.
LR_STEPS = ("iteration", "epoch")


def as_scheduler(value: Any) -> Any:
    """A float becomes a constant schedule; a scheduler needs ``step``, ``to_record``
    and ``load_record``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not value >= 0:
            raise ConfigError(f"ember: Learner: the learning rate must be >= 0, got {value}")
        return ConstantLr(float(value))
    if all(callable(getattr(value, name, None)) for name in ("step", "to_record", "load_record")):
        return value
    raise ConfigError(
        f"ember: Learner: lr_scheduler must be a learning rate (float) or a scheduler with step(), to_record() "
        f"and load_record() (e.g. CosineAnnealingLrSchedulerConfig(1e-3, 1000).init()), got {type(value).__name__}"
    )


class Learner:
    """What is trained: ``Learner(model, optim, lr_scheduler)``.

    The model defines ``train_step(batch)`` and ``valid_step(batch)`` (see
    :mod:`ember.train.step`), or functions ``train_step(model, batch)`` and
    ``valid_step(model, batch)`` are passed here. ``lr_scheduler`` is a float
    (a constant rate) or a scheduler from ``ember.optim.lr_scheduler``; it steps once
    per training iteration (Burn's), or once at the start of each epoch with
    ``lr_step="epoch"`` (PyTorch's ``scheduler.step()`` after each epoch: a
    ``StepLrSchedulerConfig(0.1, step_size=30)`` then counts epochs).
    ``strategy=ember.distributed.DataParallel()`` trains data parallel over the ranks
    of an ``mpiexec`` launch (see :mod:`ember.train.parallel`); the default is one device.

    The steps run under :func:`ember.compile` (see :mod:`ember.train.compiled_steps`):
    on a single device the forward, backward and the optimizer's update are one
    compiled step; ``learner.compiled.stats()`` counts its traces and replays. A
    compiled step runs its Python once, when it is traced, so side effects in
    ``train_step``/``valid_step`` (a counter, a print, a value from a Python iterator)
    would happen once, not per batch. ``compile="auto"`` (the default) compiles on flex
    (CPU) devices and checks each trace for such effects (:mod:`ember.train.side_effects`):
    a step that has them, or that cannot be traced, runs eagerly after one
    :class:`~ember.capture.CompileWarning`. ``compile=True`` compiles on every device
    without the check; ``compile=False`` runs eagerly.

    ``precision`` is ``"32-true"`` (default), ``"bf16-mixed"`` or ``"16-mixed"``: the
    mixed modes run the training and validation steps under
    ``ember.autocast(device, bfloat16 | float16)``; ``"16-mixed"`` also scales the loss
    with a :class:`~ember.amp.GradScaler` (``grad_scaler``, default ``GradScaler()``),
    skips steps whose gradients overflow and saves the scaler with checkpoints. A
    ``train_step`` that calls ``backward`` itself (returning ``TrainOutput``) scales its
    loss with ``learner.grad_scaler.scale(loss)``.

    >>> learner = Learner(model, AdamConfig().init(), 1e-3)  # doctest: +SKIP
    >>> model, summary = SupervisedTraining("runs/mlp").num_epochs(5).launch(learner, train, valid)  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Module,
        optim: Any,
        lr_scheduler: Any,
        *,
        train_step: Callable[[Module, Any], Any] | None = None,
        valid_step: Callable[[Module, Any], Any] | None = None,
        training: SupervisedTraining | None = None,
        strategy: Any = None,
        precision: str | Precision = "32-true",
        grad_scaler: GradScaler | None = None,
        lr_step: str = "iteration",
        compile: bool | str = "auto",
    ):
        if not isinstance(model, Module):
            raise ConfigError(f"ember: Learner: the model must be a Module, got {type(model).__name__}")
        if not all(callable(getattr(optim, name, None)) for name in ("step", "save_file", "load_file")):
            raise ConfigError(
                f"ember: Learner: optim must be a module optimizer (e.g. AdamConfig().init()), got {type(optim).__name__}"
            )
        if lr_step not in LR_STEPS:
            raise ConfigError(
                f"ember: Learner: lr_step must be one of {', '.join(map(repr, LR_STEPS))} (when the scheduler steps), "
                f"got {lr_step!r}"
            )
        for name, fn in (("train_step", train_step), ("valid_step", valid_step)):
            if fn is not None and not callable(fn):
                raise ConfigError(f"ember: Learner: {name} must be a function (model, batch) -> output")
        self.model = model
        self.optim = optim
        self.lr_scheduler = as_scheduler(lr_scheduler)
        self.lr_step = lr_step
        self.train_step_fn = train_step
        self.valid_step_fn = valid_step
        self.training = training
        self.strategy = strategy
        self.precision = Precision.parse(precision)
        if grad_scaler is not None and not isinstance(grad_scaler, GradScaler):
            raise ConfigError(f"ember: Learner: grad_scaler must be a GradScaler, got {type(grad_scaler).__name__}")
        if self.precision.loss_scaling:
            self.grad_scaler = grad_scaler or GradScaler()
        else:
            self.grad_scaler = grad_scaler or GradScaler(enabled=False)
        if not isinstance(compile, bool) and compile != "auto":
            raise ConfigError(f"ember: Learner: compile must be True, False or 'auto', got {compile!r}")
        self.compiled = CompiledSteps(self, auto=compile == "auto") if compile else None

    # ------------------------------------------------------------------ steps
    def _autocast(self, model: Module) -> Any:
        dtype = self.precision.autocast_dtype
        if dtype is None:
            return nullcontext()
        devices = model.devices()
        if not devices:
            return nullcontext()
        return autocast(devices[0], dtype)

    def optimizer_step(self, lr: float, model: Module, grads: GradientsParams) -> Module:
        """``optim.step`` through the grad scaler (unscaled, skipped on overflow, the
        scale updated); a plain ``optim.step`` without loss scaling."""
        scaler = self.grad_scaler
        if not scaler.is_enabled():
            return self.optim.step(lr, model, grads)
        model = scaler.step(self.optim, lr, model, grads)
        scaler.update()
        return model

    def update_step(self, lr: float, model: Module, batch: Any) -> tuple[Module, Any]:
        """One training step and the optimizer's update: ``(new model, item)`` (one
        compiled call with ``compile=True``)."""
        if self.compiled is not None:
            return self.compiled.update_step(model, batch, lr)
        out = self.eager_train_step(model, batch)
        return self.optimizer_step(lr, model, out.grads), out.item

    def train_step(self, model: Module, batch: Any) -> TrainOutput:
        """Runs the training step and returns ``TrainOutput(grads, item)`` (compiled with
        ``compile=True``)."""
        if self.compiled is not None:
            return self.compiled.train_step(model, batch)
        return self.eager_train_step(model, batch)

    def eager_train_step(self, model: Module, batch: Any) -> TrainOutput:
        """The training step as written (what ``compile=True`` traces)."""
        if self.train_step_fn is None and not callable(getattr(model, "train_step", None)):
            raise ConfigError(
                f"ember: Learner: {type(model).__name__} has no train_step(batch); define train_step and "
                "valid_step on the model (see ember.train.step) or pass train_step=fn(model, batch)"
            )
        with self._autocast(model):
            out = (
                self.train_step_fn(model, batch)
                if self.train_step_fn is not None
                else cast(TrainStep, model).train_step(batch)
            )  # checked callable above
        if isinstance(out, TrainOutput):
            return out
        loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
        if loss is None or not hasattr(loss, "backward"):
            raise ConfigError(
                f"ember: Learner: train_step returned {type(out).__name__}; return TrainOutput.new(model, "
                "loss.backward(), item) or an item with a loss tensor (e.g. ClassificationOutput)"
            )
        try:
            grads = self.grad_scaler.scale(loss).backward()
        except GraphError as error:
            if type(error) is not GraphError:  # a compiled step's graph break: ember.compile falls back on it
                raise
            raise GraphError(f"{error} (in the learner's training step: is the model on an autodiff device?)") from None
        return TrainOutput(GradientsParams.from_grads(grads, model), out)

    def valid_step(self, model: Module, batch: Any) -> Any:
        """Runs the validation step on ``model`` (already ``valid()``; compiled with
        ``compile=True``)."""
        if self.compiled is not None:
            return self.compiled.valid_step(model, batch)
        return self.eager_valid_step(model, batch)

    def eager_valid_step(self, model: Module, batch: Any) -> Any:
        """The validation step as written."""
        if self.valid_step_fn is not None:
            with self._autocast(model):
                return self.valid_step_fn(model, batch)
        if callable(getattr(model, "valid_step", None)):
            with self._autocast(model):
                return cast(ValidStep, model).valid_step(batch)
        raise ConfigError(
            f"ember: Learner: {type(model).__name__} has no valid_step(batch); define it on the model or pass "
            "valid_step=fn(model, batch) (or fit without a valid loader)"
        )

    def fit(self, train_loader: DataLoader, valid_loader: DataLoader | None = None) -> TrainingResult:
        """Trains with the setup given by :meth:`SupervisedTraining.build` (a default
        one otherwise: one epoch, no files); returns the model and a summary."""
        from ember.train.training import SupervisedTraining

        training = self.training if self.training is not None else SupervisedTraining()
        return training.launch(self, train_loader, valid_loader)

    def __repr__(self) -> str:
        precision = "" if self.precision.name == "32-true" else f", precision={self.precision.name!r}"
        mode = "False" if self.compiled is None else "'auto'" if self.compiled.auto else "True"
        compiled = "" if mode == "'auto'" else f", compile={mode}"
        return f"Learner({type(self.model).__name__}, {self.optim!r}, {self.lr_scheduler!r}{precision}{compiled})"
