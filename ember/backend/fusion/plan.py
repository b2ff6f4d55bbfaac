"""What every fusion target's executors and plans share.

An *executor* turns a graph (its run-time scalars are
:class:`~ember.backend.fusion.graph.Sc` placeholders) into a :class:`Plan`, cached
by the graph's structure (:class:`Executor`). A plan holds *variants*: on a run
whose scalars no variant accepts, it *lowers* the graph for them
(:meth:`Plan.lower`, the one method a target must write: expand the composites for
these scalars, schedule, generate code) and keeps the result, at most
:attr:`Plan.MAX_VARIANTS` of them. A variant's ``run(backend, inputs, scalars)``
returns ``None`` when the scalars fail its guards (a decomposition's truth test on a
scalar, such as ``if weight_decay:``, answered otherwise), so that another variant
is tried or lowered.

The fallback policy is this module's, the same on every target: a plan whose
lowering raises runs op by op from then on (:class:`~ember.backend.fusion.replay.Replay`,
the reference executor: the user's computation is not lost) and says so once with
a :class:`~ember.errors.FallbackWarning` naming the target and the cause, never
silently. The test suite makes that warning an error.

Donation (a caller offering input buffers for outputs to be written into, see
``ember.compile``) and bindings (inputs held across runs) are opt-in: a plan
accepts none unless its target sets :attr:`Plan.accepts_donations` and
overrides :meth:`Plan.bind` (the LLVM target does).
"""

from __future__ import annotations

import contextlib
import gc
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from ember.backend.fusion.graph import Graph
from ember.backend.fusion.replay import Replay, ReplayError
from ember.errors import FallbackWarning


class Variant(Protocol):
    """One lowering of a plan's graph, for the answers its scalars gave."""

    #: The (output, input) donations the variant was lowered for, and those it accepted.
    offered: tuple
    donated: tuple

    def run(self, backend: Any, inputs: list[Any], scalars: Any) -> list[Any] | None:
        """The outputs, or ``None`` when ``scalars`` fail this variant's guards."""
        ...


def warn_fallback(target: str, graph: Any, error: BaseException, stacklevel: int = 2) -> None:
    """Warns that ``target`` could not lower ``graph`` (``error``) and replays it."""
    warnings.warn(
        f"ember: fusion: the {target} executor could not lower a graph of {len(graph.nodes)} nodes "
        f"({type(error).__name__}: {error}); it runs op by op instead. Please report this with the "
        "graph (str(graph)).",
        FallbackWarning,
        stacklevel=stacklevel + 1,
    )


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a lowering (back on afterwards, if it
    was on). Lowering allocates hundreds of thousands of objects that stay alive
    until the code is made (the LLVM IR builder's values, the schedule), so the
    collector's full passes, each over every object of the process, find nothing to
    free: on the digits example (``examples/classify_digits.py``) they cost about
    0.09 s of CPU of the 0.2 s its two plans take to generate their IR."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _fixed_key(fixed: dict[int, Any] | None) -> tuple:
    return tuple(sorted((k, type(v).__name__, repr(v)) for k, v in (fixed or {}).items()))


class Plan:
    """A graph structure for one target: its variants, its fallback, its donations.

    A target subclasses it and implements :meth:`lower`; ``target`` names it in
    messages. ``fixed`` maps placeholders whose values never change (a captured
    step's literals) to them: runs do not pass those (see :meth:`all_scalars`).
    """

    #: The target's name in messages ("LLVM", "WGSL", "CUDA").
    target = "fusion"
    #: Variants kept per plan (a graph whose scalars keep flipping zero-ness).
    MAX_VARIANTS = 8
    #: Whether :meth:`run` passes the caller's ``donated`` pairs to lowering (else
    #: every output is a fresh buffer and ``donated`` is ignored).
    accepts_donations = False

    def __init__(self, graph: Graph, executor: Any, fixed: dict[int, Any] | None = None) -> None:
        self.graph = graph
        self.executor = executor
        self.fixed = dict(fixed or {})
        self.variants: list[Any] = []
        self.replay: Replay | None = None  # set if lowering failed: the plan runs op by op
        self._lock = threading.RLock()  # a binding's runner may run while its miss handler holds it

    # ------------------------------------------------------------------ a target's part
    def lower(self, backend: Any, scalars: Sequence[Any], donated: tuple) -> Any:
        """A new :class:`Variant` of the graph for the run-time ``scalars`` (fixed ones
        left out, as runs give them) and the ``donated`` pairs offered."""
        raise NotImplementedError(f"{type(self).__name__}.lower")

    def run_variant(self, variant: Any, backend: Any, inputs: list[Any], scalars: Sequence[Any]) -> list[Any] | None:
        """``variant``'s outputs, or ``None`` when the scalars fail its guards."""
        return variant.run(backend, inputs, scalars)

    def lowered(self, variant: Any) -> None:
        """Notes a new variant in the executor's ``stats`` (plans made, lowering time)."""
        self.executor.count("plans")
        self.executor.count("compile_s", getattr(variant, "compile_s", 0.0))

    # ------------------------------------------------------------------ shared
    def run(self, backend: Any, inputs: list[Any], scalars: Sequence[Any] = (), donated: tuple = ()) -> list[Any]:
        """The outputs of the graph for its ``inputs`` (the backend's primitives) and
        run-time ``scalars``; ``donated`` offers (output, input) pairs where the target
        accepts donations. One run at a time: a variant's buffers are its own."""
        offered = tuple(donated) if self.accepts_donations else ()
        with self._lock:
            if self.replay is not None:
                return self.replay.run(backend, inputs, self.all_scalars(scalars))
            for variant in self.variants:
                if variant.offered == offered:
                    out = self.run_variant(variant, backend, inputs, scalars)
                    if out is not None:
                        return out
            fresh = self._lower(backend, scalars, offered)
            if fresh is None:
                replay = self.replay
                assert replay is not None, "a plan whose lowering failed replays"
                return replay.run(backend, inputs, self.all_scalars(scalars))
            out = self.run_variant(fresh, backend, inputs, scalars)
            if out is None:  # pragma: no cover - a fresh variant answers its own guards
                raise ReplayError("ember: fusion: a fresh variant failed its own scalar guards")
            return out

    def _lower(self, backend: Any, scalars: Sequence[Any], offered: tuple) -> Any:
        """A new variant, kept (``None`` if lowering failed: the plan replays from now on,
        with a warning)."""
        try:
            with collector_paused():
                variant = self.lower(backend, scalars, offered)
        except Exception as error:  # a lowering bug must not lose the user's computation
            warn_fallback(self.target, self.graph, error, stacklevel=4)
            self.replay = Replay(self.graph)
            return None
        self.lowered(variant)
        if len(self.variants) >= self.MAX_VARIANTS:
            self.variants.pop(0)
        self.variants.append(variant)
        return variant

    def all_scalars(self, scalars: Sequence[Any]) -> list[Any]:
        """The run's scalars with the fixed ones in their slots."""
        if not self.fixed:
            return scalars if type(scalars) is list else list(scalars)
        given = iter(scalars)
        total = len(scalars) + len(self.fixed)
        return [self.fixed[i] if i in self.fixed else next(given) for i in range(total)]

    def donated(self, offered: tuple) -> tuple[tuple[int, int], ...]:
        """The pairs of ``offered`` the latest variant lowered for them accepted (empty
        before the first such run, when the plan replays, or when the target accepts
        no donations)."""
        for variant in reversed(self.variants):
            if variant.offered == offered:
                return variant.donated
        return ()

    def bind(self, donated: tuple, arrays: list[Any]) -> Any:
        """A binding that holds the inputs of the accepted pairs of ``donated`` across
        runs, or ``None`` (the default: the target binds nothing)."""
        return None

    # The latest variant's parts, for inspection (tests, benchmarks).
    @property
    def schedule(self) -> Any:
        return self.variants[-1].schedule


class Executor:
    """A target's plans, cached by graph structure (least recently used dropped
    first beyond :attr:`MAX_PLANS`), and its ``stats``."""

    #: The target's name (``EMBER_FUSION_EXECUTOR``'s value for it).
    name = "fusion"
    #: The plan class of the target.
    plan_class: type[Plan] = Plan
    #: Plans kept.
    MAX_PLANS = 512

    def __init__(self) -> None:
        self._plans: OrderedDict[tuple, Plan] = OrderedDict()
        self._lock = threading.Lock()
        self.stats: dict[str, Any] = {"plans": 0, "compile_s": 0.0}

    def plan(self, graph: Graph, fixed_scalars: dict[int, Any] | None = None) -> Any:
        """The plan of ``graph`` (cached by structure). ``fixed_scalars`` maps
        placeholders that keep one value to it; runs need not pass them."""
        # A structure leaves out constant values: graphs with other constants (another
        # trace's) get their own plan. The plan keeps its constants alive, so ids stay unique.
        key = (
            graph.structure(),
            tuple(id(v) for v in graph.consts.values()),
            _fixed_key(fixed_scalars),
            self.settings_key(graph),
        )
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
        plan = self.plan_class(graph, self, fixed_scalars)
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > self.MAX_PLANS:
                self._plans.popitem(last=False)
        return plan

    def settings_key(self, graph: Graph) -> tuple:
        """The settings a plan of ``graph`` is built with that may change between
        plans in a process (a target's environment variables): part of the cache key."""
        return ()

    def count(self, name: str, amount: Any = 1) -> None:
        """Adds ``amount`` to ``stats[name]``."""
        with self._lock:
            self.stats[name] += amount

    def cache_size(self) -> int:
        """Plans cached (each may hold several variants)."""
        return len(self._plans)
