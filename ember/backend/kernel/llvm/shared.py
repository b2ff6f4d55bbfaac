"""Kernel functions compiled once per process and called by name from other modules.

A function whose IR depends only on a *recipe* (a tuple of plain values, such as a
direct convolution's geometry) is worth compiling once, not in every module that
calls it: flex's eager kernel, a compiled training plan and its validation plan all
convolve a layer with the same direct kernel. :class:`SharedKernel` compiles it in
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
from dataclasses import dataclass

import llvmlite.binding as llvm
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


@dataclass(frozen=True)
class SharedKernel:
    """A kernel function shared by name: ``stem`` and ``recipe`` name it (``recipe``, a
    tuple of plain values, determines its IR, given ember's source), ``signature``
    declares it, and ``build(module, name)`` defines it in a module of its own (with any
    internal helpers; the function itself is made external); ``needs``, the shared
    kernels it calls (registered before it)."""

    stem: str
    recipe: tuple
    signature: ir.FunctionType
    build: Callable[[ir.Module, str], ir.Function]
    needs: tuple[SharedKernel, ...] = ()

    def register(self) -> str:
        """Compiles (or loads) and registers the function unless done already in this
        process (the kernels it ``needs`` first); its symbol. Call it before loading
        cached code that calls it. Raises what
        :func:`~ember.backend.kernel.llvm.jit.compile_module` raises."""
        name = symbol(self.stem, self.recipe)
        if name in _LOADED:
            return name
        for needed in self.needs:
            needed.register()
        with _LOCK:
            if name not in _LOADED:

                def text() -> str:
                    own = ir.Module(name=name)
                    own.triple = jit.triple()
                    own.data_layout = jit.data_layout()
                    self.build(own, name).linkage = ""
                    return str(own)

                compiled = jit.compile_module(text, [name], cache=True, recipe=("shared", name, *self.recipe))
                llvm.add_symbol(name, compiled.addresses[name])
                _LOADED[name] = compiled
        return name

    def declare(self, module: ir.Module) -> ir.Function:
        """``module``'s declaration of the function, registered first (see
        :meth:`register`)."""
        name = self.register()
        found = module.globals.get(name)
        if found is None:
            found = ir.Function(module, self.signature, name=name)
        return found

    def address(self) -> int:
        """The function's address, registered first: for callers outside compiled code
        (ctypes)."""
        name = self.register()
        return _LOADED[name].addresses[name]


__all__ = ["SharedKernel", "symbol"]
