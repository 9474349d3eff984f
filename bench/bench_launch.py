"""How the benchmarks start their ranks: under torchrun (RANK/WORLD_SIZE set),
or as local processes they spawn themselves."""
from __future__ import annotations

import os
import socket
import sys

# Benchmarks run as scripts (python bench/x.py): make the repository's pycomm
# importable without installing it.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_entry(rank, world_size, port, backend, main, args):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    _run_rank(backend, main, args)


def _run_rank(backend, main, args):
    import torch
    import torch.distributed as dist

    # One compute thread per rank: ranks share the host's cores.
    torch.set_num_threads(int(os.environ.get("PYCOMM_BENCH_THREADS", "1")))
    dist.init_process_group(backend)
    try:
        main(args)
    finally:
        import pycomm

        pycomm.destroy()
        dist.destroy_process_group()


def launch(main, args, nproc: int, backend: str = "gloo"):
    """Runs main(args) on every rank: here if torchrun started us, else in
    `nproc` spawned processes."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        _run_rank(backend, main, args)
        return
    # Single-threaded BLAS in every rank, before torch is imported there.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    import torch.multiprocessing as mp

    mp.spawn(_rank_entry, args=(nproc, _free_port(), backend, main, args), nprocs=nproc)
