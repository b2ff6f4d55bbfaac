"""``dataclass_transform`` for the checker on every supported Python.

``Module`` and ``Config`` generate ``__init__`` from annotations at class creation;
this marker (PEP 681) tells type checkers so. Python 3.10 lacks it in ``typing``,
where it is a no-op here (the marker only matters to the checker).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover - Python 3.10

    def dataclass_transform(**kwargs: Any) -> Callable[[Any], Any]:
        return lambda cls: cls


__all__ = ["dataclass_transform"]
