"""Whether NCCL can run these ranks on these GPUs: the rule every GPU benchmark follows.

NCCL before 2.30 refuses two ranks on one GPU ("Duplicate GPU detected"); 2.30 and
later allow it when NCCL_MULTI_RANK_GPU_ENABLE=1 is set. The GPU machine's torch 2.11
carries NCCL 2.28.9, so there its NCCL rows are skipped with this reason and DDP's stock
all-reduce runs over gloo instead.
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
