"""``LocalCommunicator``: the world of one process, with no MPI installed."""

from __future__ import annotations

import copy
import sys
from typing import Any

import numpy as np

from ember.distributed.communicator import ReduceOp
from ember.errors import ConfigError


class _Done:
    """A request that is complete from the start."""

    def wait(self) -> None:
        return None

    def test(self) -> bool:
        return True


class LocalCommunicator:
    """Rank 0 of a world of size 1: every collective is the identity (a copy), so a
    script written for ``mpiexec -n N`` runs unchanged as a plain ``python`` process."""

    rank = 0
    size = 1
    name = "local"

    def __init__(self, timeout: float = 60.0):
        self.timeout = float(timeout)

    def all_reduce(self, array: np.ndarray, op: ReduceOp) -> np.ndarray:
        return np.array(array, copy=True)

    def all_reduce_start(self, buffer: np.ndarray, op: ReduceOp, detail: str = "") -> _Done:
        return _Done()

    def broadcast(self, array: np.ndarray, root: int) -> np.ndarray:
        _check_root(root, 1)
        return np.array(array, copy=True)

    def all_gather(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, copy=True)[None]

    def reduce_scatter(self, array: np.ndarray, op: ReduceOp) -> np.ndarray:
        return np.array(array, copy=True)

    def reduce_scatter_in_place(self, buffer: np.ndarray, op: ReduceOp) -> None:
        return None

    def all_gather_in_place(self, buffer: np.ndarray) -> None:
        return None

    def barrier(self) -> None:
        return None

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [copy.deepcopy(obj)]

    def broadcast_object(self, obj: Any, root: int) -> Any:
        _check_root(root, 1)
        return copy.deepcopy(obj)

    def abort(self, message: str, code: int = 1) -> None:
        print(message, file=sys.stderr, flush=True)
        raise SystemExit(code)

    def __repr__(self) -> str:
        return "LocalCommunicator(rank=0, size=1)"


def _check_root(root: Any, size: int) -> int:
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= int(root) < size:
        raise ConfigError(f"ember.distributed: root must be a rank in [0, {size}), got {root!r}")
    return int(root)
