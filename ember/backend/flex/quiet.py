"""Silence numpy's floating-point warnings inside flex's own calls.

PyTorch returns ``inf``/``nan`` for ``1/0`` or ``log(0)`` without a word; numpy
warns. flex sets numpy's error state to "ignore" around each kernel and restores
it afterwards, leaving the user's own numpy settings untouched. numpy's
``errstate`` costs about a microsecond per call, so the context variable behind
it is used directly where numpy exposes it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])

try:  # numpy >= 2: the error state is a context variable
    # private names, absent from numpy's stubs; the except below covers their absence
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj  # type: ignore[attr-defined]

    _IGNORE = _make_extobj(all="ignore")
    _set = _extobj_contextvar.set
    quiet_reset = _extobj_contextvar.reset

    def quiet_set() -> Any:
        """Enter the quiet error state; pass the result to :func:`quiet_reset`."""
        return _set(_IGNORE)

except (ImportError, AttributeError, TypeError):  # pragma: no cover - older numpy

    def quiet_set() -> Any:
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def quiet_reset(state: Any) -> None:
        state.__exit__(None, None, None)


def quietly(fn: F) -> F:
    """Runs ``fn`` in the quiet error state (a decorator for flex's kernels). The
    per-op paths (unary, binary, cast, matmul, reduce), the linear layer's two
    kernels and the MSE loss inline :func:`quiet_set` / :func:`quiet_reset` instead: a wrapper's extra
    call is a measurable share of a small op's cost there."""

    @functools.wraps(fn)
    def quiet(*args: Any, **kwargs: Any) -> Any:
        token = quiet_set()
        try:
            return fn(*args, **kwargs)
        finally:
            quiet_reset(token)

    return quiet  # type: ignore[return-value]  # same signature as fn (functools.wraps)
