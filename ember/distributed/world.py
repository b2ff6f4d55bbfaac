"""The world this process belongs to: :func:`init`, :func:`rank`, :func:`world_size`,
:func:`barrier`.

``init()`` picks the communicator: MPI when the process was started by an MPI
launcher (``mpiexec``/``mpirun``, Slurm's ``srun``), a one-process world otherwise,
so the same script runs with and without ``mpiexec``. ``EMBER_DIST_BACKEND=mpi`` or
``local`` forces the choice; ``EMBER_DIST_TIMEOUT`` sets the default timeout.
"""

from __future__ import annotations

import os
from typing import Any

from ember.distributed.communicator import Communicator
from ember.distributed.local import LocalCommunicator
from ember.errors import ConfigError

DEFAULT_TIMEOUT = 60.0

# Variables that MPI launchers set in every rank's environment.
_LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "HYDI_CONTROL_FD")

_world: Communicator | None = None


def launched_by_mpi() -> bool:
    """Whether an MPI launcher started this process (``mpiexec``, ``mpirun``, ``srun``
    with PMI), judged from the environment it sets."""
    if any(name in os.environ for name in _LAUNCHER_VARS):
        return True
    ntasks = os.environ.get("SLURM_NTASKS") or os.environ.get("SLURM_NPROCS")
    return "SLURM_PROCID" in os.environ and ntasks is not None and ntasks != "1"


def _default_timeout() -> float:
    text = os.environ.get("EMBER_DIST_TIMEOUT")
    if text is None:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"ember.distributed: EMBER_DIST_TIMEOUT must be a number of seconds, got {text!r}") from None
    return _check_timeout(value)


def _check_timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"ember.distributed: the timeout must be a number of seconds > 0, got {value!r}")
    return float(value)


def init(
    communicator: Communicator | None = None, *, backend: str | None = None, timeout: float | None = None
) -> Communicator:
    """Joins the world (once; later calls return the same communicator).

    ``backend`` is ``"mpi"`` or ``"local"`` (default: ``EMBER_DIST_BACKEND``, else MPI
    when started by an MPI launcher). ``timeout`` (default 60 s, or
    ``EMBER_DIST_TIMEOUT``) bounds every collective: a rank that fails, dies or
    stops answering ends the run with an error naming it instead of a hang. A custom
    ``communicator`` (any :class:`Communicator`) is used as given.

    >>> import ember.distributed as dist
    >>> dist.init().size if dist.world_size() == 1 else 1
    1
    """
    global _world
    seconds = _default_timeout() if timeout is None else _check_timeout(timeout)
    if _world is not None:
        if communicator is not None and communicator is not _world:
            raise ConfigError("ember.distributed.init: the world is already initialised with another communicator")
        if timeout is not None:
            _world.timeout = seconds
        return _world
    if communicator is not None:
        if not isinstance(communicator, Communicator):
            raise ConfigError(
                f"ember.distributed.init: expected a Communicator (MpiCommunicator, LocalCommunicator), "
                f"got {type(communicator).__name__}"
            )
        _world = communicator
        return _world
    choice = backend or os.environ.get("EMBER_DIST_BACKEND") or ("mpi" if launched_by_mpi() else "local")
    if choice == "local":
        _world = LocalCommunicator(seconds)
    elif choice == "mpi":
        from ember.distributed.mpi import MpiCommunicator

        _world = MpiCommunicator(timeout=seconds)
    else:
        raise ConfigError(f"ember.distributed.init: backend must be 'mpi' or 'local', got {choice!r}")
    return _world


def communicator() -> Communicator:
    """The world's communicator (initialising it on first use)."""
    return _world if _world is not None else init()


def is_initialized() -> bool:
    return _world is not None


def rank() -> int:
    """This process's rank, 0 to ``world_size() - 1``."""
    return communicator().rank


def world_size() -> int:
    """The number of ranks."""
    return communicator().size


def is_main() -> bool:
    """Whether this is rank 0, the rank that writes logs, dashboards and checkpoints."""
    return communicator().rank == 0


def barrier() -> None:
    """Waits until every rank has called it."""
    communicator().barrier()
