"""What ``Learner(compile="auto")`` checks before it keeps a step compiled: the Python
side effects a trace would freeze.

A compiled step runs its Python once, when it is traced; later calls replay the graph.
A step that counts calls, prints, sleeps, reads the clock, a Python or numpy random
generator or a Python iterator would silently do so once. :func:`audited` runs the
trace under :func:`sys.setprofile` and lists such effects in *user code* (code outside
ember, the standard library and installed packages): a write to a global or to an
enclosing function's variable, an attribute set or deleted outside a constructor,
advancing a generator created outside the step, calls to ``print``, ``input``,
``open``, ``next``, ``time``, ``random`` or ``os`` functions, and draws from Python's or
numpy's global random generator (their states are compared before and after). It is a heuristic (a list appended
to from a step is not seen); ``compile=True`` compiles without it.
"""

from __future__ import annotations

import dis
import inspect
import os
import random
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

_EMBER = str(Path(__file__).resolve().parents[1])
_LIBRARIES = tuple(
    {str(Path(p).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib") if (p := sysconfig.get_path(key))}
)
_CONSTRUCTORS = frozenset({"__init__", "__post_init__", "__new__", "__setattr__", "__set_name__", "__init_subclass__"})
_BUILTINS = frozenset({"print", "input", "open", "next", "exec", "eval", "breakpoint"})
_GENERATOR = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR
_MODULES = ("time", "random", "numpy.random", "os", "posix", "_random", "builtins.input")


def _is_user_code(code: CodeType) -> bool:
    name = code.co_filename
    if not name or name.startswith("<"):
        return False  # generated (dataclasses' __init__) or frozen: not written by the user
    path = os.path.realpath(name)
    return not path.startswith(_EMBER) and not path.startswith(_LIBRARIES)


_found: dict[CodeType, tuple[str, ...]] = {}


def _code_effects(code: CodeType) -> tuple[str, ...]:
    """The side-effect statements of ``code`` (cached per code object)."""
    known = _found.get(code)
    if known is not None:
        return known
    where = _where(code)
    effects: list[str] = []
    constructor = code.co_name in _CONSTRUCTORS
    for ins in dis.get_instructions(code):
        op = ins.opname
        if op in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            effects.append(f"{where} writes the global {ins.argval!r}")
        elif op in ("STORE_DEREF", "DELETE_DEREF") and ins.argval in code.co_freevars:
            effects.append(f"{where} writes {ins.argval!r} of an enclosing function")
        elif op in ("STORE_ATTR", "DELETE_ATTR") and not constructor:
            effects.append(f"{where} sets the attribute {ins.argval!r}")
    found = tuple(dict.fromkeys(effects))
    _found[code] = found
    return found


def _where(code: CodeType) -> str:
    return f"{getattr(code, 'co_qualname', code.co_name)} ({Path(code.co_filename).name})"


def _start(code: CodeType) -> int:
    """Where a generator's frame stands at its first resume."""
    return next((ins.offset for ins in dis.get_instructions(code) if ins.opname == "RESUME"), 0)


def _builtin_effect(fn: Any) -> str | None:
    name = getattr(fn, "__name__", "")
    owner = getattr(fn, "__self__", None)
    module = getattr(fn, "__module__", None) or ("" if owner is None else type(owner).__module__)
    if module == "builtins" and name in _BUILTINS and getattr(fn, "__self__", None) in (None, sys.modules["builtins"]):
        return f"calls {name}()"
    if any(module == m or module.startswith(m + ".") for m in _MODULES):
        return f"calls {module}.{name}()"
    return None


def audited(fn: Callable[..., Any], *args: Any) -> tuple[Any, list[str]]:
    """``fn(*args)`` and the side effects found while it ran (see the module docstring)."""
    effects: dict[str, None] = {}
    users: dict[CodeType, bool] = {}  # per code object: written by the user?
    started: list[FrameType] = []  # generators started during the run (held: ids stay unique)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            user = users.get(code)
            if user is None:
                user = users[code] = _is_user_code(code)
                if user:
                    effects.update(dict.fromkeys(_code_effects(code)))
            if user and code.co_flags & _GENERATOR and not any(f is frame for f in started):
                if frame.f_lasti == _start(code):
                    started.append(frame)
                else:  # a generator the step did not start: it keeps its place between calls
                    effects[f"{_where(code)} is a generator created outside the step and advanced by it"] = None
        elif event == "c_call" and users.get(frame.f_code):
            effect = _builtin_effect(arg)
            if effect is not None:
                effects[f"{_where(frame.f_code)} {effect}"] = None

    generators = _global_generators()
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(previous)
    for name, state in _global_generators().items():
        if not _same(state, generators[name]):  # drawn from by a call no profile event shows (numpy's are Cython)
            effects[f"the step draws from {name}"] = None
    return result, list(effects)


def _global_generators() -> dict[str, Any]:
    """The states of the process-wide random generators a step might draw from."""
    states: dict[str, Any] = {"Python's random module": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states["numpy's global random generator (numpy.random)"] = numpy.random.get_state(legacy=False)
    return states


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if hasattr(a, "shape"):
        return bool((a == b).all())
    return bool(a == b)
