"""A kernel's iteration space, simplified: what every printer loops over.

:func:`simplify` drops size-1 dims and merges neighbouring dims that every access
(each load's and store's :class:`~ember.backend.kernel.views.View`) walks as one run,
keeping a reduced dim apart; a dense elementwise kernel becomes one flat loop with no
index arithmetic. The LLVM loops (:mod:`ember.backend.kernel.llvm.loops`) and the CUDA C
printer (:mod:`ember.backend.cuda.codegen`) both start from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.backend.kernel.views import View


@dataclass
class Space:
    """A kernel's simplified space: ``sizes`` (outermost first), the position of the
    reduced dim (``red``), and per access (in the order given to :func:`simplify`)
    its strides along the kept dims and its offset."""

    sizes: list[int]
    red: int | None
    strides: list[list[int]]  # [access][dim]
    offsets: list[int]

    def flat(self, access: int) -> bool:
        """Whether ``access`` walks the space row-major (address = offset + linear index)."""
        step = 1
        for size, stride in zip(reversed(self.sizes), reversed(self.strides[access])):
            if size != 1 and stride != step:
                return False
            step *= size
        return True

    def mode(self, access: int) -> str:
        """``"z"`` (one element: every stride 0), ``"f"`` (flat) or ``"g"`` (general)."""
        if all(s == 0 or z == 1 for s, z in zip(self.strides[access], self.sizes)):
            return "z"
        return "f" if self.flat(access) else "g"

    def args(self) -> list[int]:
        """The geometry as numbers: sizes, then each access's strides, then the offsets
        (the order of a printer's dynamic geometry parameters)."""
        return list(self.sizes) + [s for row in self.strides for s in row] + list(self.offsets)


def full_view(view: View, space: tuple[int, ...], dim: int | None) -> View:
    """``view`` (over the full space, the reduced space with ``dim`` of size 1, or one
    element) seen over the full space: stride 0 along ``dim`` or everywhere."""
    if view.shape == () or view.size == 1:
        return View(space, (0,) * len(space), view.offset)
    if dim is None or view.shape == space:
        return view
    strides = list(view.strides)
    strides[dim] = 0
    return View(space, tuple(strides), view.offset)


def simplify(space: tuple[int, ...], dim: int | None, views: list[View]) -> Space:
    """The simplified :class:`Space` of a loop nest over ``space`` (reducing along
    ``dim``, or elementwise for ``None``) whose accesses are ``views``."""
    full = [full_view(v, space, dim) for v in views]
    kept = [k for k in range(len(space)) if space[k] != 1 or k == dim]
    dims: list[tuple[int, list[int]]] = []  # (size, strides per access), outermost first
    red = None
    for k in kept:
        strides = [f.strides[k] for f in full]
        if dims and k != dim and red != len(dims) - 1:
            size0, strides0 = dims[-1]
            if all(s0 == s * space[k] for s0, s in zip(strides0, strides)):
                dims[-1] = (size0 * space[k], strides)
                continue
        if k == dim:
            red = len(dims)
        dims.append((space[k], strides))
    return Space(
        [d[0] for d in dims], red, [[d[1][a] for d in dims] for a in range(len(views))], [f.offset for f in full]
    )
