"""Which executor a fusion device uses.

A backend declares its fusion target (``Backend.fusion_target``; :data:`TARGETS`
maps each to its executor, whose plans share :mod:`ember.backend.fusion.plan`). A
fusion device over flex compiles its streams with the LLVM executor
(:mod:`ember.backend.fusion.llvm`) when llvmlite imports; over cube (wgpu) the WGSL
executor (:mod:`ember.backend.fusion.wgsl`) lowers them to fused kernels and replays
repeated plans from tapes; over the cuda backend the CUDA executor
(:mod:`ember.backend.fusion.cuda`) replays them and captures repeated plans as CUDA
Graphs; over any other backend, they are replayed call by call
(:class:`ReplayExecutor`). A missing llvmlite is reported once per process with a
warning.

``EMBER_FUSION_EXECUTOR=replay`` forces replay (for comparisons and debugging);
``=llvm`` requires the LLVM executor over flex and fails if it cannot load;
``=wgsl`` names the WGSL executor over cube (the default there).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from typing import Any

from ember.backend.fusion.graph import Graph
from ember.backend.fusion.replay import Replay
from ember.errors import FallbackWarning

#: Environment variable choosing the executor of fusion devices: llvm | wgsl | replay.
EXECUTOR_ENV = "EMBER_FUSION_EXECUTOR"

_LOCK = threading.Lock()
_SHARED: dict[str, Any] = {}


class ReplayExecutor:
    """Plans that replay each recorded call on the wrapped backend; ``check`` compares
    every result with the inferred shape and dtype (on for lazy streams, where the
    cost is small next to the op itself)."""

    name = "replay"

    def __init__(self, check: bool = True):
        self.check = check

    def plan(self, graph: Graph, fixed_scalars: dict[int, Any] | None = None) -> Replay:
        return Replay(graph, self.check, fixed_scalars)


def _llvm() -> Any:
    """The process's LLVM executor (one, so compiled plans are shared), or ``None``
    with a one-time notice when llvmlite is missing."""
    with _LOCK:
        if "llvm" in _SHARED:
            return _SHARED["llvm"]
        try:
            from ember.backend.fusion.llvm import LLVMExecutor

            executor = LLVMExecutor()
        except (ImportError, OSError) as error:
            executor = None
            warnings.warn(
                f"ember: fusion: the LLVM executor is unavailable ({error}); fusion devices over flex replay "
                "their ops without compiling them. Install llvmlite to compile them.",
                FallbackWarning,
                stacklevel=4,
            )
        _SHARED["llvm"] = executor
        return executor


def _cuda(inner: Any) -> Any:
    """The cuda backend's executor (one per backend, so plans and graphs are shared)."""
    with _LOCK:
        executor = getattr(inner, "_fusion_executor", None)
        if executor is None:
            from ember.backend.fusion.cuda.executor import CudaExecutor

            executor = inner._fusion_executor = CudaExecutor()
        return executor


def _wgsl(inner: Any) -> Any:
    """The process's WGSL executor (one, so lowered plans are shared)."""
    with _LOCK:
        executor = _SHARED.get("wgsl")
        if executor is None:
            from ember.backend.fusion.wgsl import CubeExecutor

            executor = _SHARED["wgsl"] = CubeExecutor()
        return executor


#: Per fusion target a backend declares (``Backend.fusion_target``): its executor for
#: that backend (``None`` where it cannot load: the device replays).
TARGETS: dict[str, Callable[[Any], Any]] = {"llvm": lambda inner: _llvm(), "wgsl": _wgsl, "cuda": _cuda}


def default_executor(inner: Any) -> Any:
    """The executor for a fusion device wrapping the backend ``inner``: the one of the
    fusion target ``inner`` declares (``fusion_target``), else replay."""
    choice = os.environ.get(EXECUTOR_ENV, "").strip().lower()
    if choice not in ("", "llvm", "wgsl", "replay"):
        from ember.errors import ConfigError

        raise ConfigError(f"ember: {EXECUTOR_ENV}={choice!r}: expected 'llvm', 'wgsl' or 'replay'")
    if choice == "replay":
        return ReplayExecutor()
    target = getattr(inner, "fusion_target", None)
    make = TARGETS.get(target) if target is not None else None
    executor = make(inner) if make is not None else None
    if executor is None:
        if choice == "llvm" and target == "llvm":
            from ember.errors import BackendUnavailableError

            raise BackendUnavailableError(
                f"ember: {EXECUTOR_ENV}=llvm but the LLVM executor cannot load; install llvmlite"
            )
        return ReplayExecutor()
    return executor


def reset() -> None:
    """Forgets the shared executors (tests simulate a missing llvmlite with it)."""
    with _LOCK:
        _SHARED.clear()
