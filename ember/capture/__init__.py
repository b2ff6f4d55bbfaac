"""Whole-step capture: ``ember.compile`` traces a Python function (a training step,
with its backward and optimizer update) into one graph and replays it.

The package, by concept: ``compiled`` (``CompiledFunction``: guard keys, the fast
path, tracing), ``trace`` and ``tracer`` (the trace and the backend that records it),
``sources`` and ``writes`` (where each input of the graph is read and each output
stored), ``entry`` (one trace and its replays), ``runner`` (the generated steady-state
runner), ``pytree`` (argument structures), ``leaves`` (modules' parameters, guard keys),
``arrays`` (packing and donated arrays), and shape buckets: ``buckets`` (the sizes, the
padding), ``bucketed`` (``BucketedFunction``) and ``row_flow`` (the check that a trace
keeps padded rows apart from the real ones). Modules and optimizers reach a trace only
through :mod:`ember.tensor.capture_hook`."""

from ember.capture.buckets import BucketError
from ember.capture.compiled import CompiledFunction, CompileWarning, RecompileWarning, compile
from ember.capture.pytree import register_dataclass, register_pytree_node

__all__ = [
    "BucketError",
    "CompileWarning",
    "CompiledFunction",
    "RecompileWarning",
    "compile",
    "register_dataclass",
    "register_pytree_node",
]
