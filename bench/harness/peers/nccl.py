"""NCCL: whether it can run these ranks on these GPUs (the rule every GPU benchmark
follows), and its all-reduce as a column of the CUDA bench.

NCCL before 2.30 refuses two ranks on one GPU ("Duplicate GPU detected"); 2.30 and later
allow it when NCCL_MULTI_RANK_GPU_ENABLE=1 is set. The GPU machine's torch 2.11 carries
NCCL 2.28.9, so there its NCCL rows are skipped with this reason and DDP's stock all-reduce
runs over gloo instead.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

# The first NCCL that runs several ranks on one GPU, and the variable that asks it to.
SHARED_GPU_NCCL = (2, 30)
SHARED_GPU_ENV = "NCCL_MULTI_RANK_GPU_ENABLE"


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
