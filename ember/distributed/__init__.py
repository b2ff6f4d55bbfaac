"""``ember.distributed``: data-parallel training over MPI, from one machine to many
(the role of Burn's ``burn-collective``).

>>> import ember.distributed as dist
>>> dist.init()            # doctest: +SKIP
>>> dist.rank(), dist.world_size()   # doctest: +SKIP
(0, 2)

Launch a script with ``mpiexec -n N python script.py`` (``pip install "ember[dist]"``
brings mpi4py and the mpich wheel); run without ``mpiexec`` and the world has one
rank, so the same script works both ways. Collectives take Tensors of any device
(staged through host memory; see :mod:`ember.distributed.staging`). For training:
:class:`DataParallel` (``Learner(..., strategy=DataParallel())`` or by hand) and
:class:`DistributedSampler`; ``DataParallel(model).compile(loss_fn, optim)`` for a compiled
step. Faults end the run with an error naming the rank
instead of a hang (see :mod:`ember.distributed.watchdog`).
"""

from ember.distributed.bucket import BucketPlan, GradSync
from ember.distributed.collectives import (
    all_gather,
    all_gather_object,
    all_reduce,
    broadcast,
    broadcast_object,
    reduce_scatter,
)
from ember.distributed.communicator import Communicator, ReduceOp, Request
from ember.distributed.compiled_step import CompiledStep
from ember.distributed.data_parallel import DataParallel, GradSession, broadcast_module, check_models_match
from ember.distributed.local import LocalCommunicator
from ember.distributed.mpi import MpiCommunicator
from ember.distributed.sampler import DistributedSampler
from ember.distributed.world import (
    barrier,
    communicator,
    init,
    is_initialized,
    is_main,
    launched_by_mpi,
    rank,
    world_size,
)

DistributedDataParallel = DataParallel  # Burn's name (LearningStrategy::DistributedDataParallel)

__all__ = [
    "BucketPlan",
    "Communicator",
    "CompiledStep",
    "DataParallel",
    "DistributedDataParallel",
    "DistributedSampler",
    "GradSession",
    "GradSync",
    "LocalCommunicator",
    "MpiCommunicator",
    "ReduceOp",
    "Request",
    "all_gather",
    "all_gather_object",
    "all_reduce",
    "barrier",
    "broadcast",
    "broadcast_object",
    "broadcast_module",
    "check_models_match",
    "communicator",
    "init",
    "is_initialized",
    "is_main",
    "launched_by_mpi",
    "rank",
    "reduce_scatter",
    "world_size",
]
