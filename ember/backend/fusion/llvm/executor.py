"""The LLVM executor: plans that run a graph as compiled code plus eager calls.

``LLVMExecutor().plan(graph)`` takes a graph whose run-time scalars are
:class:`~ember.backend.fusion.graph.Sc` placeholders (``Graph.abstract_scalars``);
``fixed_scalars`` names placeholders whose values never change (a captured step's
literals: betas, epsilon), which compile as constants.
On its first run a plan compiles a *variant*: it expands the graph's composites
for the scalars given (:mod:`~ember.backend.fusion.primitive_graph`), groups it into kernels
(:mod:`~ember.backend.fusion.scheduler`), runs each convolution chain per sample
(:mod:`~ember.backend.fusion.chains`, unless ``LLVMExecutor(conv_chains=False)``), places its buffers in an arena
(:mod:`~ember.backend.fusion.memory`), generates one LLVM function per run of
compiled steps (:mod:`~ember.backend.fusion.llvm.codegen`) and JIT-compiles them.
``plan.run(flex, inputs, scalars)`` then computes the variant's scalars from the
run's (a decomposition's truth test on one, such as ``if weight_decay:``, is a
guard: other answers compile another variant), makes each compiled segment one
ctypes call, and runs the nodes left to flex between segments, as replay does.

``plan.run(..., donated=((k, i), ...))`` offers output ``k`` the buffer of input
``i`` (:func:`~ember.backend.fusion.memory.donate` accepts the safe pairs): the
returned array of an accepted pair *is* ``inputs[i]``, updated in place. The caller
gives up ``inputs[i]``: it must not be read as the old value afterwards, and must
not share memory with another input.

A variant (:mod:`.variant`) runs as one generated Python function (:mod:`.runner`)
that calls each compiled segment without arguments (the code reads the tables'
addresses from its module's table global, written once the module is loaded: they
are not constants of the IR, so a plan's machine code is kept on disk and a later
process with the same graph loads it, see
:mod:`~ember.backend.kernel.llvm.object_cache`): a short segment as a Python
builtin, a long one through ctypes (:mod:`.native_calls`). ``plan.bind(donated, arrays)`` (a :class:`Binding`)
goes further for a training loop: the donated inputs stay bound across runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.backend.flex import blas as blas_mod
from ember.backend.fusion.graph import Graph
from ember.backend.fusion.llvm import flash_graph
from ember.backend.fusion.llvm.sgemm import direct_convolutions, own_sgemm
from ember.backend.fusion.llvm.support import BLAS_THRESHOLD, LLVMTarget
from ember.backend.fusion.llvm.variant import Variant
from ember.backend.fusion.plan import Executor, Plan
from ember.backend.kernel.llvm import small_gemm


class LLVMExecutor(Executor):
    """Compiles fusion graphs for the CPU. Plans are cached by structure, in-process."""

    name = "llvm"

    def __init__(self, blas_threshold: int = BLAS_THRESHOLD, conv_chains: bool = True) -> None:
        super().__init__()
        self.plan_class = LLVMPlan
        self.blas = blas_mod.load()
        self.target = LLVMTarget(self.blas, blas_threshold)
        #: Whether a convolution, its elementwise epilogue and a max pooling run per
        #: sample as one step (:mod:`ember.backend.fusion.chains`).
        self.conv_chains = conv_chains
        self.stats["compile_cpu_s"] = 0.0

    def plan(self, graph: Graph, fixed_scalars: dict[int, Any] | None = None) -> LLVMPlan:
        plan = super().plan(graph, fixed_scalars)
        assert isinstance(plan, LLVMPlan)
        return plan

    def settings_key(self, graph: Graph) -> tuple:
        """Which float32 product the plan runs (``EMBER_GEMM``, read per plan): ember's own,
        whether small convolutions run the direct kernel, whether products may run as
        inline loops, and whether attention runs in the flash form (``EMBER_FLASH``)."""
        return (own_sgemm(graph) is not None, direct_convolutions(), small_gemm.enabled(), flash_graph.mode())


class LLVMPlan(Plan):
    """A graph structure for the CPU: its compiled variants, one per answer to the
    truth tests its decompositions make on run-time scalars (usually one) and per
    set of donations offered (see :class:`~ember.backend.fusion.plan.Plan`)."""

    target = "LLVM"
    accepts_donations = True
    executor: LLVMExecutor

    def lower(self, backend: Any, scalars: Sequence[Any], donated: tuple) -> Variant:
        return Variant(self.graph, scalars, self.executor, self.fixed, donated)

    def lowered(self, variant: Variant) -> None:
        super().lowered(variant)
        self.executor.count("compile_cpu_s", variant.compile_cpu_s)

    def bind(self, donated: tuple, arrays: list[np.ndarray]) -> Binding | None:
        """A :class:`Binding` that holds the inputs of the pairs of ``donated`` this
        plan accepted (:meth:`donated`; ``arrays`` are those inputs' arrays, by input
        position), or ``None`` when there are none or an array cannot be written in
        place (not dense or not writable)."""
        accepted = self.donated(donated)
        positions = tuple(sorted(i for _, i in accepted))
        if not positions or len(arrays) != len(positions):
            return None
        for a in arrays:
            if not (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable):
                return None
        if len({id(a) for a in arrays}) != len(arrays):
            return None
        return Binding(self, donated, accepted, positions, list(arrays))

    @property
    def memory(self) -> Any:
        return self.variants[-1].memory


class Binding:
    """A plan with the inputs of its accepted donations held across runs.

    ``LLVMPlan.bind(donated, arrays)`` hands the plan the arrays of those inputs (a
    training step's parameters and optimizer moments); each :meth:`run` takes only
    the other inputs and updates the held arrays in place, returning the outputs
    that were not written into them. Nothing about the held arrays is checked or
    rebound per run: the caller must not replace or resize them while it uses the
    binding (to change them, bind again).
    """

    def __init__(
        self, plan: LLVMPlan, offered: tuple, accepted: tuple, positions: tuple[int, ...], arrays: list[np.ndarray]
    ):
        self.plan = plan
        self.offered = offered
        self.accepted = accepted
        self.positions = positions  # held input positions, ascending
        self.arrays = arrays
        self._runners: dict[Variant, Any] = {}  # per variant: its runner of this binding
        #: ``run(backend, inputs, scalars)``: the outputs not written into held arrays,
        #: for the other ``inputs`` (in input order) and ``scalars``; ``None`` when the
        #: variant these scalars need does not accept the same donations (bind again
        #: then). It is the generated runner of the variant that ran last.
        self.run: Callable[..., list[Any] | None] = self._miss

    def runner(self, variant: Variant) -> Any:
        """``variant``'s runner of this binding (generated on first use)."""
        runner = self._runners.get(variant)
        if runner is None:
            runner = self._runners[variant] = variant.held_runner(self)
        return runner

    def _miss(self, backend: Any, inputs: list[Any], scalars: list[Any]) -> list[Any] | None:
        """A run whose scalars the last variant's guards refused (or the first run):
        another variant's, compiled if needed."""
        plan = self.plan
        with plan._lock:
            if plan.replay is not None:
                return None
            for variant in plan.variants:
                if variant.offered == self.offered and variant.donated == self.accepted:
                    runner = self.runner(variant)
                    out = runner(backend, inputs, scalars, False)
                    if out is not None:
                        self.run = runner
                        return out
            fresh = plan._lower(backend, scalars, self.offered)
            if fresh is None or fresh.donated != self.accepted:
                return None
            self.run = self.runner(fresh)
            return self.run(backend, inputs, scalars, False)
