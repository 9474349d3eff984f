"""pycomm: shared-memory (and CUDA IPC) collectives for PyTorch.

    import torch.distributed as dist, pycomm
    dist.init_process_group("gloo")
    comm = pycomm.init()
    pycomm.all_reduce(t, op="sum")
"""
import torch  # noqa: F401  (loads libc10 and friends, which _C links against)

from . import _C
from ._C import CollectiveMismatch, CommError, CommTimeout
from .comm import Communicator, all_reduce, barrier, destroy, get_communicator, init

CommError.__module__ = CommTimeout.__module__ = CollectiveMismatch.__module__ = "pycomm"

__all__ = [
    "CollectiveMismatch",
    "CommError",
    "CommTimeout",
    "Communicator",
    "all_reduce",
    "barrier",
    "cuda_built",
    "destroy",
    "get_communicator",
    "init",
]


def cuda_built() -> bool:
    """Whether pycomm's CUDA sources were compiled into this build."""
    return _C.cuda_built()
