"""What every fusion target's plans share.

:func:`warn_fallback` is the one fallback policy: a plan whose lowering raises runs
op by op from then on (the replay executor's results, so the user's computation is
not lost) and says so with a :class:`~ember.errors.FallbackWarning` naming the
target and the cause, never silently.
"""

from __future__ import annotations

import warnings
from typing import Any

from ember.errors import FallbackWarning


def warn_fallback(target: str, graph: Any, error: BaseException, stacklevel: int = 2) -> None:
    """Warns that ``target`` could not lower ``graph`` (``error``) and replays it."""
    warnings.warn(
        f"ember: fusion: the {target} executor could not lower a graph of {len(graph.nodes)} nodes "
        f"({type(error).__name__}: {error}); it runs op by op instead. Please report this with the "
        "graph (str(graph)).",
        FallbackWarning,
        stacklevel=stacklevel + 1,
    )
