"""NCCL: whether it can run these ranks on these GPUs (the rule every GPU benchmark
follows), and its all-reduce as a column of the CUDA bench.

NCCL before 2.30 refuses two ranks on one GPU ("Duplicate GPU detected"); 2.30 and later
allow it when NCCL_MULTI_RANK_GPU_ENABLE=1 is set. The GPU machine's torch 2.11 carries
NCCL 2.28.9, so bench/gpu/build_nccl.sh builds a 2.30 small enough to carry there
(CARRIED). Where it is, use_carried has the rank processes a bench starts load it ahead of
torch's own (LD_PRELOAD: the dynamic linker then takes it for torch's libnccl.so.2, whose
name it bears). Without it, the NCCL rows there are skipped with this reason and DDP's
stock all-reduce runs over gloo instead. Every record names the NCCL that ran: its version
and the file it was loaded from (which_text).
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

from .. import REPO_ROOT

# The first NCCL that runs several ranks on one GPU, and the variable that asks it to.
SHARED_GPU_NCCL = (2, 30)
SHARED_GPU_ENV = "NCCL_MULTI_RANK_GPU_ENABLE"
# Where bench/gpu/build_nccl.sh leaves its NCCL, relative to the checkout.
CARRIED = "bench/out/nccl/libnccl.so.2"


def nccl_version() -> Optional[Tuple[int, ...]]:
    """The NCCL that torch carries, as (major, minor, patch), or None without one."""
    import torch

    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a CPU build of torch has no NCCL
        return None
    return tuple(int(x) for x in v[:3]) if isinstance(v, tuple) else None


def version_text(v: Optional[Tuple[int, ...]]) -> str:
    return ".".join(map(str, v)) if v else "none"


def carried_path() -> str:
    """Where this checkout keeps the NCCL of bench/gpu/build_nccl.sh (it may not be there)."""
    return os.path.join(REPO_ROOT, CARRIED)


def use_carried() -> Optional[str]:
    """Has the processes this one starts from now on (the ranks: spawned, or torchrun's)
    load the NCCL of bench/gpu/build_nccl.sh ahead of torch's own, and run several ranks on
    one GPU; returns its path, or None where it was not built or carried (torch's own
    NCCL runs). This process keeps the NCCL it has."""
    path = carried_path()
    if not os.path.exists(path):
        return None
    preload = os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
    if path not in preload:
        os.environ["LD_PRELOAD"] = " ".join([path] + preload)
    os.environ.setdefault(SHARED_GPU_ENV, "1")
    return path


def loaded_library() -> Optional[str]:
    """The file of the NCCL that torch calls (torch's own, or one preloaded ahead of it),
    None where torch has no CUDA library. Two copies may be mapped (torch's own is loaded
    by path as well), so this asks which one libtorch_cuda's ncclGetVersion resolves to."""
    import ctypes

    import torch

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so")
    try:
        handle = ctypes.CDLL(lib, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
        info = DlInfo()
        if not dladdr(ctypes.cast(handle.ncclGetVersion, ctypes.c_void_p), ctypes.byref(info)):
            return None
    except (OSError, AttributeError):
        return None  # a CPU build of torch, or one that links no NCCL
    return os.path.realpath(info.dli_fname.decode()) if info.dli_fname else None


def which_text() -> str:
    """The NCCL that runs here, as records name it: "2.30.7 (/path/libnccl.so.2)"."""
    v = nccl_version()  # loads torch's NCCL (or the preloaded one) if nothing has yet
    return f"{version_text(v)} ({loaded_library() or 'no library mapped'})" if v else "none"


def prepare_nccl(ranks: int, gpus: int) -> Optional[str]:
    """None when NCCL can run `ranks` ranks on `gpus` GPUs (after setting
    NCCL_MULTI_RANK_GPU_ENABLE where they share one), else why it cannot."""
    v = nccl_version()
    if v is None:
        return "torch carries no NCCL"
    if gpus < 1:
        return "no GPU visible"
    if ranks <= gpus:
        return None
    if v[:2] < SHARED_GPU_NCCL:
        return (f"NCCL {version_text(v)} refuses {ranks} ranks on {gpus} GPU(s) ('Duplicate GPU "
                f"detected'); {version_text(SHARED_GPU_NCCL)}+ with {SHARED_GPU_ENV}=1 allows it")
    # Set before the first NCCL communicator is created, which reads it.
    os.environ.setdefault(SHARED_GPU_ENV, "1")
    return None


def stock_backend(device: str, ranks: int, gpus: int):
    """(backend, why not NCCL or None) of a training bench's stock all-reduce: gloo on CPUs;
    on GPUs NCCL, unless the ranks share a GPU and this NCCL refuses that, and then gloo,
    which all-reduces CUDA tensors through the host: still DDP's own all-reduce."""
    if device != "cuda":
        return "gloo", None
    why = prepare_nccl(ranks, gpus)
    return ("nccl", None) if why is None else ("gloo", why)


def cuda_candidate(world):
    """NCCL's all-reduce on a group of its own: (prepare, None) or (None, why not), where
    prepare(t) returns a call that all-reduces t in place and returns it."""
    torch, dist = world.torch, world.dist
    refused = prepare_nccl(world.size, torch.cuda.device_count())
    if refused:
        return None, refused

    def setup():
        group = dist.new_group(backend="nccl")
        dist.all_reduce(torch.ones(4, device=world.device), group=group)
        torch.cuda.synchronize()
        return group

    group, why = world.on_every_rank(setup, limit=100)
    if group is None:
        return None, why
    return (lambda t: (lambda: (dist.all_reduce(t, group=group), t)[1])), None
