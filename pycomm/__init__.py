"""pycomm: shared-memory collectives for PyTorch's CPU ranks, inside each host
(gloo between hosts). A CUDA all-reduce over CUDA IPC has run on a GPU once
(values right; no speed target judged yet: docs/cuda.md).

    import torch.distributed as dist, pycomm
    dist.init_process_group("cpu:pycomm")      # every collective, DDP and FSDP2 with no hook

    dist.init_process_group("gloo")            # or pycomm's own API beside another backend
    pycomm.all_reduce(t, op="sum")
    model.register_comm_hook(None, pycomm.ring_hook)

    backend = pycomm.ProcessGroup(store, rank, world_size, timeout)  # no default group, as gloo's
    from pycomm.torchft import ProcessGroupPycomm  # torchft's process group (needs torchft)

Where torch or the runtime extension pycomm._C cannot load, `import pycomm`
still works, for `pycomm doctor` to say why: the runtime's names then raise an
AttributeError, and the modules that read its tables (pycomm.config,
pycomm.routing) an ImportError, that names the ImportError that stopped it (and
with torch there, importing pycomm warns at once).
"""
from ._version import __version__  # there even when the runtime is not

__all__ = [
    "CollectiveMismatch",
    "CommError",
    "CommTimeout",
    "Communicator",
    "PeerDied",
    "ProcessGroup",
    "RingState",
    "all_reduce",
    "allreduce_gradients",
    "barrier",
    "cpu_vector_path",
    "cuda_built",
    "destroy",
    "get_communicator",
    "init",
    "ring_hook",
]

try:
    import torch  # noqa: F401  (loads libc10 and friends, which _C links against)
    import torch.distributed  # noqa: F401  (registers c10d's types, which _C's backend uses)

    # Not `from . import _C`: where _C was never built, its error blames a circular import.
    import pycomm._C as _C
except ImportError as error:
    _RUNTIME_ERROR = error
    from ._runtime_missing import runtime_missing

    runtime_missing(error)
else:
    _RUNTIME_ERROR = None
    from . import backend
    from .backend import ProcessGroup
    from .errors import CollectiveMismatch, CommError, CommTimeout, PeerDied
    from .bucketing import allreduce_gradients
    from .comm import Communicator, all_reduce, barrier, destroy, get_communicator, init
    from .hooks import RingState, ring_hook

    backend.register()

    def cuda_built() -> bool:
        """Whether pycomm's CUDA sources were compiled into this build."""
        return _C.cuda_built()

    def cpu_vector_path() -> str:
        """The vector loops pycomm's CPU kernels (reductions, casts, bucket packing)
        were compiled with: "avx2+f16c" (x86), "neon" (Arm), or "none (scalar
        loops)" for a build without them (e.g. PYCOMM_MARCH=x86-64). Every path
        computes the same bits."""
        return _C.cpu_vector_path()


def __getattr__(name):
    if _RUNTIME_ERROR is not None and name in __all__:
        # An AttributeError, so hasattr() and getattr(..., default) work; it
        # says why and chains the ImportError.
        raise AttributeError(f"pycomm.{name} needs pycomm's runtime, which did not load: "
                             f"{_RUNTIME_ERROR}") from _RUNTIME_ERROR
    raise AttributeError(f"module 'pycomm' has no attribute {name!r}")
