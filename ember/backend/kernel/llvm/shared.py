"""Kernel functions compiled once per process and called by name from other modules.

A function whose IR depends only on a *recipe* (a tuple of plain values, such as a
direct convolution's geometry) is worth compiling once, not in every module that
calls it: flex's eager kernel, a compiled training plan and its validation plan all
convolve a layer with the same direct kernel. :func:`shared_function` compiles it in
a module of its own (its machine code kept on disk by the object cache, keyed by the
recipe), registers its address with LLVM's process symbol table under a name made
from the recipe, and declares it in the calling module. The caller's machine code is
linked to it when loaded, so a module that calls a shared function must be compiled
or loaded after the function was registered: callers ask for it while they emit
their IR, or, where a cached module is loaded without emitting its IR, before they
load it.

Measured on the digits example (``benchmarks/learner_compile.py --clock cpu``): its
three direct convolutions were about a third of the training plan's LLVM time, and
most of the validation plan's.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable

from llvmlite import ir

from ember.backend.kernel.llvm import jit, object_cache

_LOCK = threading.Lock()
#: symbol -> the compiled module defining it (kept alive: other modules' code calls it)
_LOADED: dict[str, jit.Compiled] = {}


def symbol(stem: str, recipe: tuple) -> str:
    """The process-wide name of the function ``recipe`` makes: ``stem`` and a digest of
    the recipe and of ember's kernel source (an edited emitter gets a new name)."""
    digest = hashlib.sha256(f"{object_cache.source_digest()}\n{recipe!r}".encode()).hexdigest()
    return f"{stem}_{digest[:20]}"


def shared_function(
    module: ir.Module,
    stem: str,
    recipe: tuple,
    signature: ir.FunctionType,
    build: Callable[[ir.Module, str], ir.Function],
) -> ir.Function:
    """``module``'s declaration of the function ``build(m, name)`` defines in a module
    ``m`` of its own (its signature ``signature``; ``recipe`` determines its IR, given
    ember's source), compiled once per process and once per machine.

    ``build`` may define helpers beside it (internal); the function itself is made
    external. Raises what :func:`~ember.backend.kernel.llvm.jit.compile_module` raises."""
    name = ensure(stem, recipe, build)
    found = module.globals.get(name)
    if found is None:
        found = ir.Function(module, signature, name=name)
    return found


def ensure(stem: str, recipe: tuple, build: Callable[[ir.Module, str], ir.Function]) -> str:
    """Compiles (or loads) and registers the function of :func:`shared_function`
    unless done already in this process; its symbol."""
    name = symbol(stem, recipe)
    if name in _LOADED:
        return name
    with _LOCK:
        if name not in _LOADED:

            def text() -> str:
                own = ir.Module(name=name)
                own.triple = jit.triple()
                own.data_layout = jit.data_layout()
                build(own, name).linkage = ""
                return str(own)

            compiled = jit.compile_module(text, [name], cache=True, recipe=("shared", name, *recipe))
            import llvmlite.binding as llvm

            llvm.add_symbol(name, compiled.addresses[name])
            _LOADED[name] = compiled
    return name


def address(stem: str, recipe: tuple, build: Callable[[ir.Module, str], ir.Function]) -> int:
    """The address of the function of :func:`shared_function`, compiled (or loaded) and
    registered unless done already: for callers outside compiled code (ctypes)."""
    name = ensure(stem, recipe, build)
    return _LOADED[name].addresses[name]


__all__ = ["address", "ensure", "shared_function", "symbol"]
