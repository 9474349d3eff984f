"""pycomm: shared-memory (and CUDA IPC) collectives for PyTorch.

    import torch.distributed as dist, pycomm
    dist.init_process_group("gloo")
    comm = pycomm.init()
    pycomm.all_reduce(t, op="sum")
"""
import torch  # noqa: F401  (loads libc10 and friends, which _C links against)

from . import _C
from ._C import CollectiveMismatch, CommError, CommTimeout
from .bucketing import allreduce_gradients
from .comm import Communicator, all_reduce, barrier, destroy, get_communicator, init
from .hooks import RingState, ring_hook

CommError.__module__ = CommTimeout.__module__ = CollectiveMismatch.__module__ = "pycomm"

__all__ = [
    "CollectiveMismatch",
    "CommError",
    "CommTimeout",
    "Communicator",
    "RingState",
    "all_reduce",
    "allreduce_gradients",
    "barrier",
    "cuda_built",
    "destroy",
    "get_communicator",
    "init",
    "ring_hook",
]


def cuda_built() -> bool:
    """Whether pycomm's CUDA sources were compiled into this build."""
    return _C.cuda_built()
