"""llvmlite set-up: the host target, the optimisation pipeline, and loading code.

:func:`compile_module` takes LLVM IR text, optimises it with the new pass manager
and compiles it with MCJIT for the host CPU (its name and features, so AVX2 or
AVX-512 are used where present). Each compiled module gets its own execution
engine, freed with the plan that owns it.

Pipeline settings (measured on this project's 2-core machine, CPU time per kernel
of an elementwise loop): the O3 pipeline with loop interleaving and unrolling costs
about 12 ms per kernel against about 7 ms without them, for no measurable gain on
the loops the fusion layer emits; reductions still vectorise (``reassoc``).

Before that pipeline, LLVM's function merging replaces functions whose bodies are
identical by one: a plan emits a function per step, and a model's repeated blocks
make many alike (W4's training plan: 174 functions, 78 of them copies, 0.5 of its
1.26 MB of IR; its eval plan 40 of 59). Measured on W4's plans (CPU time, this
module's settings): the training plan's optimisation and code generation 1.34 ->
0.87 s, the eval plan's 0.45 -> 0.14 s.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm

from ember.backend.kernel.llvm import object_cache

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}

#: The libm entry points compiled code may call (resolved through the process).
LIBM_FUNCTIONS = (
    "exp",
    "expf",
    "log",
    "logf",
    "log1p",
    "log1pf",
    "expm1",
    "expm1f",
    "sin",
    "sinf",
    "cos",
    "cosf",
    "tan",
    "tanf",
    "tanh",
    "tanhf",
    "sinh",
    "sinhf",
    "cosh",
    "coshf",
    "asin",
    "asinf",
    "acos",
    "acosf",
    "atan",
    "atanf",
    "erf",
    "erff",
    "pow",
    "powf",
    "atan2",
    "atan2f",
    "fmod",
    "fmodf",
)


def _init() -> dict[str, Any]:
    with _LOCK:
        if _STATE:
            return _STATE
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        libm = ctypes.util.find_library("m")
        if libm:
            llvm.load_library_permanently(libm)
        target = llvm.Target.from_default_triple()
        _STATE["target"] = target
        _STATE["cpu"] = llvm.get_host_cpu_name()
        _STATE["features"] = llvm.get_host_cpu_features().flatten()
        _STATE["triple"] = llvm.get_process_triple()
        _STATE["machine"] = _machine()
        return _STATE


def _machine(opt: int = 2) -> Any:
    return _STATE["target"].create_target_machine(
        cpu=_STATE["cpu"], features=_STATE["features"], opt=opt, jit=True, codemodel="jitdefault"
    )


def triple() -> str:
    return _init()["triple"]


def data_layout() -> str:
    return str(_init()["machine"].target_data)


@dataclass
class Compiled:
    """A module loaded for execution: function (and global variable) addresses by name."""

    engine: Any
    addresses: dict[str, int]
    optimize_s: float
    codegen_s: float


def compile_module(
    ir_text: str | Callable[[], str],
    names: list[str],
    *,
    unroll: bool = False,
    codegen_opt: int = 2,
    cache: bool = False,
    data: tuple[str, ...] = (),
    recipe: tuple | None = None,
) -> Compiled:
    """Optimises (O3 pipeline) and JIT-compiles ``ir_text``; returns the addresses of
    the functions ``names`` and of the global variables ``data``.

    ``unroll`` turns on loop interleaving and unrolling (off for the fusion layer's
    many small kernels, see above; flex's few native kernels, compiled once per
    process, keep them); ``codegen_opt`` is the machine code generator's level (0-3).
    ``cache=True`` (for IR that is the same in every process: no baked-in addresses)
    loads the machine code an earlier process compiled, and keeps what it compiles
    (:mod:`~ember.backend.kernel.llvm.object_cache`).

    ``ir_text`` may be a function that returns the text. With ``cache=True``, a
    ``recipe`` (a tuple of plain values that, with ember's kernel source, determines
    the IR: see :func:`~ember.backend.kernel.llvm.object_cache.source_digest`) keys the
    cache instead of the text, so a cached module loads without the text being made."""
    import time

    state = _init()
    name = None
    if cache and recipe is not None:
        name = _recipe_key(recipe, unroll, codegen_opt)
        if name is not None:
            found = _load_cached(name, names, data)
            if found is not None:
                return found
    if callable(ir_text):
        ir_text = ir_text()
    if cache and name is None:
        name = _cache_key(ir_text, unroll, codegen_opt)
        if name is not None:
            found = _load_cached(name, names, data)
            if found is not None:
                return found
    with _LOCK:
        start = time.perf_counter()
        module = llvm.parse_assembly(ir_text)
        module.verify()
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        tuning.loop_interleaving = unroll
        tuning.loop_unrolling = unroll
        tuning.loop_vectorization = True
        tuning.slp_vectorization = True
        builder = llvm.create_pass_builder(state["machine"], tuning)
        merge = llvm.create_new_module_pass_manager()  # identical functions: one (see the module docstring)
        merge.add_merge_functions_pass()
        merge.run(module, builder)
        builder.getModulePassManager().run(module, builder)
        middle = time.perf_counter()
        engine = llvm.create_mcjit_compiler(module, _machine(codegen_opt))  # the engine owns its machine
        objects: list[bytes] = []
        if name is not None:
            engine.set_object_cache(notify_func=lambda _module, buffer: objects.append(bytes(buffer)))
        engine.finalize_object()
        addresses = {name: engine.get_function_address(name) for name in names}
        addresses.update((name, engine.get_global_value_address(name)) for name in data)
        end = time.perf_counter()
    if name is not None and len(objects) == 1:
        object_cache.store(name, objects[0])
    return Compiled(engine, addresses, middle - start, end - middle)


def _cache_key(ir_text: str, unroll: bool, codegen_opt: int) -> str | None:
    """The object cache's name for a module, or ``None`` when the cache is off."""
    if object_cache.directory() is None:
        return None
    import llvmlite

    state = _STATE
    version = ".".join(map(str, llvm.llvm_version_info))
    return object_cache.key(
        llvmlite.__version__, version, state["triple"], state["cpu"], state["features"], unroll, codegen_opt, ir_text
    )


def _recipe_key(recipe: tuple, unroll: bool, codegen_opt: int) -> str | None:
    """The object cache's name for a module made from ``recipe`` (see
    :func:`compile_module`), or ``None`` when the cache is off or the recipe's text
    is not the same from one process to the next (it names an object's address)."""
    text = repr(recipe)
    if object_cache.directory() is None or " at 0x" in text or " object at " in text:
        return None
    return _cache_key("recipe\n" + object_cache.source_digest() + "\n" + text, unroll, codegen_opt)


def _load_cached(name: str, names: list[str], data: tuple[str, ...] = ()) -> Compiled | None:
    """The module from the object cache with all of ``names`` found, or ``None``."""
    import time

    payload = object_cache.load(name)
    if payload is None:
        return None
    with _LOCK:
        start = time.perf_counter()
        try:
            # The engine compiles its (empty) module when it finalizes: at level 0 that
            # costs about half (digits' eager run loads 31 modules: 0.67-0.96 -> 0.36-0.46 ms
            # each, CPU). The loaded object's code is as it was compiled.
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _machine(0))
            engine.add_object_file(llvm.ObjectFileRef.from_data(payload))
            engine.finalize_object()
            addresses = {n: engine.get_function_address(n) for n in names}
            addresses.update((n, engine.get_global_value_address(n)) for n in data)
        except RuntimeError:
            return None
    if not all(addresses.values()):
        return None
    return Compiled(engine, addresses, 0.0, time.perf_counter() - start)


def host_features() -> str:
    return _init()["features"]


def vector_width() -> int | None:
    """The vector width compiled loops should prefer: 512 bits on AVX-512 hosts.

    LLVM's default for Intel server cores is 256 bits (older ones slowed their clock
    for 512-bit instructions). On this project's machine (Emerald Rapids) 512-bit
    loops ran the exact-GELU kernel in about 0.6x the time of 256-bit ones (CPU time,
    alternating rounds), so ember asks for them where AVX-512 exists."""
    return 512 if "+avx512f" in host_features().split(",") else None
