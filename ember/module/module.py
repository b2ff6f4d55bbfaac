"""``Module``: a declarative class whose annotated fields form a tree.

A field holding a :class:`Param`, a :class:`Module`, a :class:`RunningState`, or a
list/tuple/dict of them is visited; anything else (ints, floats, strings, enums,
configs, ``None``) is a constant, copied as is by :meth:`Module.map`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import ModuleError
from ember.module.dataclass_transform import dataclass_transform
from ember.module.field_check import check_fields
from ember.module.group import ParamGroup
from ember.module.param import Param, RunningState
from ember.module.pytorch_hints import module_attribute_error
from ember.module.visitor import FnMapper, ModuleMapper, ModuleVisitor, ParamCollector
from ember.module.weight_map import WeightMap

if TYPE_CHECKING:
    from typing import Self

    import numpy as np

_MISSING = object()


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _is_class_var(hint: Any) -> bool:
    return "ClassVar" in (hint if isinstance(hint, str) else repr(hint))


# For the checker: the generated ``__init__`` takes every field by position or keyword,
# in declaration order (base classes' fields first), as a dataclass's does.
@dataclass_transform()
class Module:
    """Base class of every module. Declare fields with annotations; ember
    generates ``__init__`` (keyword and positional), ``__repr__`` and the traversals.

    >>> from ember.nn import Linear, LinearConfig, Relu
    >>> class Mlp(Module):
    ...     l1: Linear
    ...     act: Relu
    ...     l2: Linear
    ...     def forward(self, x):
    ...         return self.l2(self.act(self.l1(x)))
    >>> Mlp(LinearConfig(4, 16).init(), Relu(), LinearConfig(16, 1).init()).num_params()
    97
    """

    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}
    #: PyTorch's names for this layer's own fields, ``{pytorch name: field}`` (the norm
    #: layers declare ``{"weight": "gamma", "bias": "beta"}``); read by :meth:`load_pytorch`.
    pytorch_names: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names: list[str] = []
        defaults: dict[str, Any] = {}
        for base in reversed(cls.__mro__):
            for name, hint in inspect.get_annotations(base).items():
                if name.startswith("_") or _is_class_var(hint):
                    continue
                if name not in names:
                    names.append(name)
                if name in base.__dict__:
                    defaults[name] = base.__dict__[name]
        cls._fields = tuple(names)
        cls._defaults = defaults
        if "forward" in cls.__dict__ and "__call__" not in cls.__dict__:
            # Calling a module runs its forward directly (one Python frame less per layer).
            cls.__call__ = cls.__dict__["forward"]  # type: ignore[method-assign]
        if "__init__" in cls.__dict__:
            cls.__init__ = _checked_init(cls.__dict__["__init__"])  # type: ignore[method-assign]
        elif cls.__init__ in (object.__init__, Module._generated_init):
            # Installs the generated __init__ (mypy refuses assigning a method, and narrows
            # cls.__init__ to object.__init__'s type here).
            cls.__init__ = Module._generated_init  # type: ignore[method-assign, assignment]

    def _generated_init(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        fields = cls._fields
        name = cls.__name__
        if len(args) > len(fields):
            raise ModuleError(
                f"ember: {name}() takes {len(fields)} fields ({', '.join(fields) or 'none'}), got {len(args)} positional"
            )
        values = dict(zip(fields, args))
        for key, value in kwargs.items():
            if key not in fields:
                raise ModuleError(
                    f"ember: {name}() got an unknown field {key!r}; its declared fields are: "
                    f"{', '.join(fields) or 'none'} (declare a field with an annotation, e.g. `{key}: Linear`)"
                )
            if key in values:
                raise ModuleError(f"ember: {name}() got field {key!r} twice")
            values[key] = value
        for field in fields:
            if field not in values:
                default = cls._defaults.get(field, _MISSING)
                if default is _MISSING:
                    raise ModuleError(f"ember: {name}() is missing the field {field!r}")
                values[field] = default
        object.__setattr__(self, "__dict__", values)
        check_fields(self, Module)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and name not in type(self)._fields:
            raise ModuleError(
                f"ember: {type(self).__name__} has no field {name!r}; declare it on the class with an "
                f"annotation (e.g. `{name}: Linear`) so that ember can visit and save it"
            )
        if name in self.__dict__ and not name.startswith("_"):
            raise ModuleError(
                f"ember: {type(self).__name__}.{name} cannot be assigned: a built module is a value, which "
                f"other modules may share; build a changed copy with `model = model.replace({name}=...)` "
                "(or map / map_params / the with_* and freeze methods, which return new modules)"
            )
        object.__setattr__(self, name, value)

    def replace(self, **changes: Any) -> Self:
        """A new module with the given fields replaced (checked as at construction); this
        one, and every module sharing its sub-modules, is unchanged.

        >>> from ember.nn import Gelu, Relu
        >>> class Block(Module):
        ...     act: Module
        >>> block = Block(Relu())
        >>> type(block.replace(act=Gelu()).act).__name__, type(block.act).__name__
        ('Gelu', 'Relu')
        """
        cls = type(self)
        for key in changes:
            if key not in cls._fields:
                raise ModuleError(
                    f"ember: {cls.__name__}.replace: {key!r} is not a field; its fields are: "
                    f"{', '.join(cls._fields) or 'none'}"
                )
        out = object.__new__(cls)
        object.__setattr__(out, "__dict__", {**self.__dict__, **changes})
        check_fields(out, Module)
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    if not TYPE_CHECKING:  # the checker reports a missing attribute itself

        def __getattr__(self, name: str) -> Any:
            # Only reached for a missing attribute: name ember's way for PyTorch's methods.
            if name.startswith("__"):
                raise AttributeError(name)
            raise module_attribute_error(type(self).__name__, name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"ember: {type(self).__name__} defines no forward()")

    # ------------------------------------------------------------------ traversal
    def visit(self, visitor: ModuleVisitor, path: str = "") -> None:
        """Call the visitor's hooks for every parameter and state, in field order."""
        visitor.enter_module(path, self)
        for name in type(self)._fields:
            _visit_value(self.__dict__.get(name), visitor, _join(path, name))
        visitor.exit_module(path, self)

    def map(self, mapper: ModuleMapper, path: str = "") -> Module:
        """A new module whose leaves are the mapper's results; this one is untouched.
        Sub-modules the mapper leaves unchanged are shared, not copied (modules are values)."""
        cls = type(self)
        current = self.__dict__
        values = None
        for name in cls._fields:
            old = current.get(name)
            new = _map_value(old, mapper, f"{path}.{name}" if path else name)
            if new is not old:
                if values is None:
                    values = dict(current)
                values[name] = new
        if values is None:
            return self
        out = object.__new__(cls)
        object.__setattr__(out, "__dict__", values)
        return out

    def map_params(self, fn: Any) -> Module:
        """``map`` with one function ``fn(param, path) -> Param`` for every parameter."""
        return self.map(FnMapper(fn))

    # ------------------------------------------------------------------ queries
    def named_params(self) -> list[tuple[str, Param]]:
        """``(dotted path, Param)`` for every parameter, in field order."""
        collector = ParamCollector()
        self.visit(collector)
        return collector.items

    def params(self) -> list[Param]:
        return [p for _, p in self.named_params()]

    def named_states(self) -> list[tuple[str, RunningState]]:
        collector = ParamCollector(states=True)
        self.visit(collector)
        return [(path, s) for path, s in collector.items if isinstance(s, RunningState)]

    def num_params(self) -> int:
        """The number of scalars in all parameters (lazy ones are not initialised)."""
        return sum(p.num_elements() for _, p in self.named_params())

    def devices(self) -> list[Device]:
        """The devices the parameters live on (in first-seen order)."""
        seen: list[Device] = []
        for _, p in self.named_params():
            if p.device not in seen:
                seen.append(p.device)
        return seen

    def modules(self) -> Iterator[tuple[str, Module]]:
        """``(path, module)`` for this module and every sub-module."""
        out: list[tuple[str, Module]] = []

        class Walker(ModuleVisitor):
            def enter_module(self, path: str, module: Any) -> None:
                out.append((path, module))

        self.visit(Walker())
        return iter(out)

    # ------------------------------------------------------------------ transforms
    def to_device(self, device: Device) -> Module:
        """A new module on ``device`` (ids kept; lazy parameters stay lazy); this one is
        unchanged: ``model = model.to_device(device)``."""
        return self.map(FnMapper(lambda p, path: p.to_device(device), lambda s, path: s.to_device(device)))

    def fork(self, device: Device) -> Module:
        """A new module on ``device`` as fresh leaves (detached from any graph); this one is
        unchanged."""
        return self.map(
            FnMapper(
                lambda p, path: (
                    p.to_device(device)
                    if not p.is_initialized()
                    else Param(p.id, p.val().detach().to_device(device), p.require_grad)
                ),
                lambda s, path: s.to_device(device),
            )
        )

    def no_grad(self) -> Module:
        """A new module with every parameter at ``require_grad=False``; this one is unchanged."""
        return self.map(FnMapper(lambda p, path: p.set_require_grad(False)))

    def valid(self) -> Module:
        """A new module on the inner (non-autodiff) device: for evaluation, where layers
        such as Dropout and BatchNorm switch to inference behaviour (``model.valid()(x)``
        with ``x`` on ``device.inner()``); this one is unchanged."""

        def move(p: Param, path: str) -> Param:
            return p.to_device(p.device.inner())

        return self.map(FnMapper(move, lambda s, path: s.to_device(s.value().device.inner())))

    def freeze(self, group: ParamGroup | None = None) -> Module:
        """A new module whose parameters in ``group`` (all if ``None``) stop requiring grad;
        this one is unchanged: ``model = model.freeze(group)``."""
        group = group or ParamGroup.all()
        return self.map(FnMapper(lambda p, path: p.set_require_grad(False) if group.matches(p.id, path) else p))

    def unfreeze(self, group: ParamGroup | None = None) -> Module:
        """A new module whose float parameters in ``group`` (all if ``None``) require grad
        again; this one is unchanged: ``model = model.unfreeze(group)``."""
        group = group or ParamGroup.all()
        return self.map(
            FnMapper(
                lambda p, path: (
                    p.set_require_grad(True)
                    if group.matches(p.id, path) and (p.dtype.is_float or p.dtype.is_complex)
                    else p
                )
            )
        )

    def clone(self) -> Module:
        """A copy of the module tree, as ``copy.deepcopy`` of a PyTorch module: parameter
        values are shared (they are immutable) and running states (batch-norm statistics)
        are new objects holding the same values, so updating one module's statistics
        leaves the other's as they were. Ids are kept."""
        return self.map(
            FnMapper(
                lambda p, path: Param(p.id, p.val(), p.require_grad) if p.is_initialized() else p,
                lambda s, path: RunningState(s.value(), s.id),
            )
        )

    def quantize(
        self,
        scheme: Any = None,
        group: ParamGroup | None = None,
        *,
        calibration: Any = None,
        include_embeddings: bool = False,
    ) -> Module:
        """A new module whose Linear and Conv layers (those ``group`` selects; by default
        all but the head) hold quantized weights (``ember.quantization``); this one is
        unchanged: ``model = model.quantize(QuantScheme.int8())``. ``scheme`` defaults to
        int8 per channel, weight-only. ``calibration`` (an iterable of model inputs) sets
        the activation scales of a ``"static"`` scheme. ``include_embeddings=True`` also
        quantizes the embeddings the group selects (weight-only; a head tied to one reads
        the packed table)."""
        from ember.module.quantize import quantize_module
        from ember.tensor.quant import QuantScheme

        scheme = QuantScheme.int8() if scheme is None else scheme
        return quantize_module(self, scheme, group, calibration, include_embeddings)

    def quantized(self, scheme: Any, input_scale: float | None = None) -> Module | None:
        """This layer in quantized form (``Module.quantize`` calls it), or ``None`` where the
        layer has none (the default); ``input_scale`` is a ``"static"`` scheme's calibrated
        activation scale."""
        return None

    # ------------------------------------------------------------------ records
    def save_file(self, path: Any, **kwargs: Any) -> None:
        """Save parameters and states to a safetensors file (see ``ember.module.record``)."""
        from ember.module.record import save_file

        save_file(self, path, **kwargs)

    def load_file(self, path: Any, **kwargs: Any) -> Module:
        """A copy of this module with values loaded from a file saved by :meth:`save_file`."""
        from ember.module.record import load_file

        return load_file(self, path, **kwargs)

    def load_pytorch(self, path: Any, **kwargs: Any) -> Module:
        """A copy with weights from a PyTorch ``state_dict`` file (see ``ember.module.pytorch``)."""
        from ember.module.pytorch import load_pytorch

        return load_pytorch(self, path, **kwargs)

    def adapt_pytorch(self, field: str, array: np.ndarray) -> np.ndarray:
        """This layer's value of ``field`` from PyTorch's ``array`` (keys already renamed by
        :attr:`pytorch_names`): the array itself, unless the layer lays the value out
        differently from PyTorch (``Linear`` transposes its weight). Used by :meth:`load_pytorch`
        and ``ember.module.foreign.load_safetensors``."""
        return array

    def export_pytorch(self, field: str, array: np.ndarray) -> np.ndarray:
        """The inverse of :meth:`adapt_pytorch`: PyTorch's layout of this layer's ``field``."""
        return array

    def adapt_pytorch_keys(self, prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """PyTorch's keys under ``prefix`` (this layer's path and a dot) renamed, split or
        joined into this layer's own, before any sub-layer adapts its fields: for layers
        whose PyTorch twin keeps differently shaped tensors under other names (``Lstm``:
        ``weight_ih_l1_reverse`` holds four gates of one cell). The identity by default."""
        return arrays

    def export_pytorch_keys(self, prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inverse of :meth:`adapt_pytorch_keys`, run after the sub-layers wrote their
        fields in PyTorch's names and layouts."""
        return arrays

    def export_pytorch_extra(self) -> dict[str, np.ndarray]:
        """Buffers that PyTorch's counterpart of this layer keeps and ember does not
        (``BatchNorm``'s ``num_batches_tracked``), by PyTorch's field name: written by
        ``export_arrays`` so that PyTorch finds every key it expects; the loaders drop
        them (``ember.module.foreign.DEFAULT_SKIP``). None by default."""
        return {}

    def weight_map(self) -> WeightMap:
        """How this module's parameter paths and layouts differ from the foreign checkpoints
        it loads (renames, fused tensors, weights stored in ember's layout, keys to ignore);
        see :mod:`ember.module.weight_map`. Models override it; the default is no difference."""
        return _NO_MAP

    def to_record(self) -> dict[str, Any]:
        """``{path: tensor}`` for every parameter and state."""
        record = {path: p.val() for path, p in self.named_params()}
        record.update({path: s.value() for path, s in self.named_states()})
        return record

    # ------------------------------------------------------------------ display
    def extra_repr(self) -> str:
        """Constants shown in the header of ``repr`` (override in layers)."""
        consts = []
        for name in type(self)._fields:
            value = self.__dict__.get(name)
            if not _is_tree(value):
                consts.append(f"{name}: {value!r}")
        return ", ".join(consts)

    def __repr__(self) -> str:
        return "\n".join(_repr_lines(self, ""))


def _is_tree(value: Any) -> bool:
    if isinstance(value, (Module, Param, RunningState)):
        return True
    if isinstance(value, (list, tuple)):
        return any(_is_tree(v) for v in value)
    if isinstance(value, dict):
        return any(_is_tree(v) for v in value.values())
    return False


def _repr_lines(module: Module, indent: str) -> list[str]:
    name = type(module).__name__
    extra = module.extra_repr()
    children = [(f, module.__dict__.get(f)) for f in type(module)._fields if _is_tree(module.__dict__.get(f))]
    header = f"{name} {{{extra}" if extra else f"{name} {{"
    if all(isinstance(v, (Param, RunningState)) for _, v in children):
        # A leaf layer: one line, as Burn prints it.
        n = module.num_params()
        summary = ", ".join(part for part in (extra, f"params: {n}" if children else "") if part)
        return [f"{name} {{{summary}}}" if summary else name]
    lines = [header]
    for field, value in children:
        lines.extend(_child_lines(field, value, indent + "  "))
    lines.append(f"{indent}  params: {module.num_params()}")
    lines.append(f"{indent}}}")
    return lines


def _child_lines(field: str, value: Any, indent: str) -> list[str]:
    if isinstance(value, Module):
        inner = _repr_lines(value, indent)
        return [f"{indent}{field}: {inner[0]}", *inner[1:]]
    if isinstance(value, (Param, RunningState)):
        return [f"{indent}{field}: {value!r}"]
    if isinstance(value, dict):
        items = list(value.items())
    else:
        items = list(enumerate(value))
    lines = [f"{indent}{field}: ["]
    for key, item in items:
        lines.extend(_child_lines(str(key), item, indent + "  "))
    lines.append(f"{indent}]")
    return lines


# Complex parameters are trainable like float ones: the float hooks visit them
# (optimizers step them, records save them, gradients are collected for them).
_KIND = {dtype: "float" if dtype.is_complex else dtype.kind for dtype in DType}
_NO_MAP = WeightMap()


def _visit_param(value: Param, visitor: ModuleVisitor, path: str) -> None:
    dtype_kind = _KIND[value._dtype]
    if dtype_kind == "float":
        visitor.visit_float(value, path)
    elif dtype_kind == "int":
        visitor.visit_int(value, path)
    else:
        visitor.visit_bool(value, path)


def _visit_value(value: Any, visitor: ModuleVisitor, path: str) -> None:
    kind = type(value)
    if kind is Param:
        _visit_param(value, visitor, path)
    elif value is None or kind in _CONSTANT_TYPES:
        return
    elif isinstance(value, Module):
        value.visit(visitor, path)
    elif isinstance(value, Param):
        _visit_param(value, visitor, path)
    elif isinstance(value, RunningState):
        visitor.visit_state(value, path)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _visit_value(item, visitor, _join(path, str(i)))
    elif isinstance(value, dict):
        for key, item in value.items():
            _visit_value(item, visitor, _join(path, str(key)))


_CONSTANT_TYPES = frozenset({int, float, str, bool, bytes})


def _map_value(value: Any, mapper: ModuleMapper, path: str) -> Any:
    """The mapped value; unchanged subtrees are returned as they are (shared)."""
    kind = type(value)
    if kind is Param or (kind not in _CONSTANT_TYPES and value is not None and isinstance(value, Param)):
        dtype_kind = _KIND[value._dtype]
        if dtype_kind == "float":
            out = mapper.map_float(value, path)
        elif dtype_kind == "int":
            out = mapper.map_int(value, path)
        else:
            out = mapper.map_bool(value, path)
        if not isinstance(out, Param):
            raise ModuleError(f"ember: a mapper returned {type(out).__name__} for {path!r}; return a Param")
        return out
    if value is None or kind in _CONSTANT_TYPES:
        return value
    if isinstance(value, Module):
        return value.map(mapper, path)
    if isinstance(value, RunningState):
        return mapper.map_state(value, path)
    if isinstance(value, (list, tuple)):
        items = [_map_value(item, mapper, _join(path, str(i))) for i, item in enumerate(value)]
        if all(a is b for a, b in zip(items, value)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        mapped = {key: _map_value(item, mapper, _join(path, str(key))) for key, item in value.items()}
        if all(mapped[key] is item for key, item in value.items()):
            return value
        return mapped
    return value


def _checked_init(init: Any) -> Any:
    """Wrap a hand-written ``__init__``: afterwards every declared field must be set."""

    def checked_init(self: Module, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        cls = type(self)
        for field in cls._fields:
            if field not in self.__dict__:
                if field in cls._defaults:
                    object.__setattr__(self, field, cls._defaults[field])
                else:
                    raise ModuleError(f"ember: {cls.__name__}.__init__ did not set the declared field {field!r}")
        check_fields(self, Module)

    checked_init.__wrapped__ = init  # type: ignore[attr-defined]
    checked_init.__doc__ = init.__doc__
    checked_init.__name__ = "__init__"
    return checked_init
