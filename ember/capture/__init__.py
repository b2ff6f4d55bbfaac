"""Whole-step capture: ``ember.compile`` traces a Python function (a training step,
with its backward and optimizer update) into one graph and replays it."""

from ember.capture.compiled import (
    CompiledFunction,
    CompileWarning,
    compile,
    register_dataclass,
    register_pytree_node,
)

__all__ = ["CompileWarning", "CompiledFunction", "compile", "register_dataclass", "register_pytree_node"]
