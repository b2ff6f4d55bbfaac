"""``OnnxModel``: an imported ONNX graph as an ember :class:`~ember.module.Module`."""

from __future__ import annotations

from typing import Any

from ember.errors import ModuleError
from ember.module import Module, Param, RunningState
from ember.onnx.program import Program
from ember.onnx.trainable import InitializerRole, ParamsDescription
from ember.tensor import Tensor
from ember.tensor.capture_hook import capturing


class OnnxModel(Module):
    """An ONNX graph whose weight initializers are parameters.

    ``weights`` maps each trainable initializer's ONNX name to a :class:`Param` (its
    path is ``weights.<name>``; ``model.params()`` lists them as for any module;
    :meth:`describe_params` lists what trains and what stays a constant, and why;
    :attr:`transposed_params` lists the Linear weights kept
    in ember's ``[d_input, d_output]`` layout); ``states`` holds BatchNormalization
    running statistics. ``program`` is the compiled graph, a constant shared by every copy
    that ``map``, ``fork`` or an optimizer step makes.

    Call it with one tensor per graph input (positionally, or by input name); it
    returns a Tensor, or a tuple of them when the graph has several outputs.

    ``compiled`` (set by ``ember.onnx.load(..., compile=True)``) is an
    ``ember.compile`` of :meth:`forward_eager` taking the model as an argument (so the
    weights are inputs of the trace, and every copy ``map`` or an optimizer step makes
    shares the traces): a call traces once per input shapes and replays after. It
    compiles the forward only: a call on an autodiff device, or inside another
    ``ember.compile`` trace, runs :meth:`forward_eager` (compile a training step whole
    with ``ember.compile`` instead).
    """

    weights: dict[str, Param]
    states: dict[str, RunningState]
    program: Program
    compiled: Any = None

    def forward(self, *args: Tensor, **kwargs: Tensor) -> Any:
        compiled = self.compiled
        if kwargs:
            args = self._arrange(args, kwargs)
        if compiled is None or capturing() or any(_tracks_grad(a) for a in args):
            return self.forward_eager(*args)
        self._check_count(args)
        return compiled(self, *args)

    @property
    def stats(self) -> dict[str, int]:
        """The compiled forward's counters (``calls``, ``traces``, ``replays``,
        ``eager``...); empty for a model loaded without ``compile=True``."""
        return dict(self.compiled.stats) if self.compiled is not None else {}

    def forward_eager(self, *args: Tensor, **kwargs: Tensor) -> Any:
        """The graph run op by op (what ``forward`` does without ``compile=True``)."""
        program = self.program
        if kwargs:
            args = self._arrange(args, kwargs)
        self._check_count(args)
        outputs = program.run(args, self.weights, self.states)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _check_count(self, args: tuple[Tensor, ...]) -> None:
        program = self.program
        if len(args) != len(program.inputs):
            names = ", ".join(spec.name for spec in program.inputs)
            raise ModuleError(f"ember: this ONNX model takes {len(program.inputs)} input(s) ({names}), got {len(args)}")

    def _arrange(self, args: tuple[Tensor, ...], kwargs: dict[str, Tensor]) -> tuple[Tensor, ...]:
        inputs = self.program.inputs
        names = [spec.name for spec in inputs]
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise ModuleError(f"ember: this ONNX model has no input {unknown[0]!r}; its inputs are {', '.join(names)}")
        out = list(args)
        for name in names[len(args) :]:
            if name not in kwargs:
                raise ModuleError(f"ember: the ONNX model's input {name!r} is missing")
            out.append(kwargs[name])
        for name in names[: len(args)]:
            if name in kwargs:
                raise ModuleError(f"ember: the ONNX model's input {name!r} is given twice")
        return tuple(out)

    @property
    def transposed_params(self) -> frozenset[str]:
        """The parameters stored transposed from their ONNX layout: weights read only by
        ``Gemm(transB=1)`` (PyTorch's Linear) are kept as ember's Linear keeps them,
        ``[d_input, d_output]``."""
        return self.program.transposed

    def describe_params(self) -> ParamsDescription:
        """Every initializer the graph computes with and what it is here: ``"trains"`` (a
        :class:`Param` that requires grad), ``"frozen"`` (a ``Param`` after ``freeze``),
        ``"constant"`` (kept in the program: no optimizer sees it, records do not hold
        it) or ``"state"`` (a running statistic), with the reason (the weight input that
        makes it a weight, or why it is a constant). ``print(model.describe_params())``
        renders a table; ``.trainable`` and ``.constants`` list the names."""
        rows = ParamsDescription()
        for role in self.program.roles:
            if role.role == "trains":
                param = self.weights.get(role.name)
                if param is not None and not param.require_grad:
                    role = InitializerRole(role.name, role.shape, role.dtype, "frozen", role.reason)
            rows.append(role)
        return rows

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.program.inputs]

    @property
    def output_names(self) -> list[str]:
        return [name for name, _ in self.program.outputs]

    def extra_repr(self) -> str:
        inputs = ", ".join(f"{spec.name}: {spec.describe_dims()}" for spec in self.program.inputs)
        return f"inputs: ({inputs}), outputs: ({', '.join(self.output_names)}), steps: {len(self.program.steps)}"


def _run_eager(model: OnnxModel, *args: Tensor) -> Any:
    """The function ``compile=True`` compiles: the model is an argument, not a closure."""
    return model.forward_eager(*args)


def _tracks_grad(value: Any) -> bool:
    return isinstance(value, Tensor) and value._device.is_autodiff()
