"""How the benchmarks start their ranks: under torchrun (RANK/WORLD_SIZE set),
or as local processes they spawn themselves."""
from __future__ import annotations

import os
import sys

# Benchmarks run as scripts (python bench/x.py): make the repository's pycomm
# importable without installing it.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)


def _rank_entry(rank, world_size, port, backend, main, args):
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    # A client of the store the launching process holds open: no port to race for.
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False)
    _run_rank(backend, main, args, store=store, rank=rank, world_size=world_size)


def _run_rank(backend, main, args, **store_args):
    import torch
    import torch.distributed as dist

    # One compute thread per rank: ranks share the host's cores.
    torch.set_num_threads(int(os.environ.get("PYCOMM_BENCH_THREADS", "1")))
    dist.init_process_group(backend, **store_args)
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
    import torch.distributed as dist
    import torch.multiprocessing as mp

    # Port 0: the system picks a free port and the store keeps it bound.
    store = dist.TCPStore("127.0.0.1", 0, nproc, is_master=True, wait_for_workers=False)
    mp.spawn(_rank_entry, args=(nproc, store.port, backend, main, args), nprocs=nproc)
    del store
