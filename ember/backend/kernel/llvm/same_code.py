"""Functions of a module that differ only in their names, kept as one.

A plan's elementwise kernels that differ only in their sizes or in where their
run-time scalars are (an optimizer's update of each parameter) are emitted as the
same code (:func:`~ember.backend.kernel.llvm.loops.outer_extent`,
:func:`~ember.backend.kernel.llvm.loops.scalar_base`): the first one stays in the
module and the others' calls call it. LLVM spends a few milliseconds on each
function it optimises whatever its size, so W4's train plan compiles fewer of them.
A shared function is kept out of line (``noinline``): inlined into each caller, it
would be optimised once per call again.
"""

from __future__ import annotations

from llvmlite import ir


class SameCode:
    """The functions of one module by their text (without their names)."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.by_text: dict[str, ir.Function] = {}
        #: How many functions were dropped for an earlier one with the same code.
        self.dropped = 0

    def share(self, fn: ir.Function) -> ir.Function:
        """``fn``, or the earlier function with the same code (``fn`` is then removed
        from the module, and the earlier one marked ``noinline``). Call it before
        adding attributes that may differ between the two (see the module docstring)."""
        text = str(fn).replace(f'@"{fn.name}"', "@", 1)
        found = self.by_text.get(text)
        if found is None:
            self.by_text[text] = fn
            return fn
        del self.module.globals[fn.name]
        found.attributes.add("noinline")
        self.dropped += 1
        return found


__all__ = ["SameCode"]
