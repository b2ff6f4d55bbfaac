"""``ember.compile(fn, buckets=...)``: a compiled function that pads its rows to buckets
(see :mod:`ember.capture.buckets`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ember.capture.buckets import Buckets, unpad
from ember.capture.compiled import CompiledFunction
from ember.capture.entry import Entry
from ember.capture.row_flow import check_outputs, row_dims
from ember.capture.sources import Argument
from ember.capture.writes import TensorResult


class BucketedFunction(CompiledFunction):
    """A :class:`CompiledFunction` traced once per bucket of its rows' count."""

    def __init__(
        self,
        fn: Callable[..., Any],
        buckets: Mapping[str | int, int],
        sizes: Sequence[int] | None = None,
        max_traces: int = 8,
        executor: Any = None,
        donate: tuple[int, ...] = (),
        recompile_warning: bool = True,
    ) -> None:
        super().__init__(fn, max_traces, executor, donate, recompile_warning)
        self.buckets = Buckets(fn, buckets, sizes)
        self.stats["padded"] = 0
        self._rows: dict[int, int] = {}  # the call in progress: id(padded tensor) -> its rows' dim
        self._counts = (0, 0)  # the call in progress: padded and real rows
        self._originals: tuple[tuple, dict] = ((), {})
        self._traced: set[int] = set()  # the bucket sizes traced

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        padded_args, padded_kwargs, rows, n, size = self.buckets.pad(args, kwargs)
        self._rows, self._counts, self._originals = rows, (size, n), (args, kwargs)
        self._ran = None
        if size != n:
            self.stats["padded"] += 1
        result = super().__call__(*padded_args, **padded_kwargs)
        entry, self._ran = self._ran, None
        if size == n or entry is None:  # exact size, or run eagerly on the real arguments
            return result
        return unpad(result, entry.row_slices or [], n)

    def _remember(self, args: tuple, kwargs: dict, key: Any, entry: Entry, result: Any) -> None:
        self._last = None  # padded arguments are new tensors per call: no fast path

    def _run_eagerly(self, args: tuple, kwargs: dict) -> Any:
        args, kwargs = self._originals
        return self.fn(*args, **kwargs)

    def _check_trace(self, entry: Entry, leaves: list[Any]) -> None:
        """Checks that the new trace keeps rows apart, and records which results to cut."""
        rows = self._rows
        inputs = {}
        for value, source in zip(entry.graph.inputs, entry.tensor_sources):
            if type(source) is Argument:
                dim = rows.get(id(leaves[source.position]))
                if dim is not None:
                    inputs[value] = dim
        found, sized = row_dims(entry.graph, inputs, self._counts)
        results = [r.output if type(r) is TensorResult else None for r in entry.results]
        entry.row_slices = check_outputs(entry.graph, found, sized, results)
        self._traced.add(self._counts[0])

    def cache_info(self) -> dict[str, Any]:
        """:meth:`CompiledFunction.cache_info`, with ``padded`` (calls whose rows were
        padded) and ``buckets`` (the bucket sizes traced, ascending)."""
        return {**super().cache_info(), "padded": self.stats["padded"], "buckets": sorted(self._traced)}
