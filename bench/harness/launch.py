"""How the benchmarks start their ranks: under torchrun (RANK and WORLD_SIZE set), or as
local processes they spawn themselves; and how rank 0's result reaches the process that
spawned them."""
from __future__ import annotations

import json
import os
import tempfile


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _rank_entry(rank, world_size, port, backend, main, args, result_path):
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    # A client of the store the launching process holds open: no port to race for.
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False)
    result = _run_rank(backend, main, args, store=store, rank=rank, world_size=world_size)
    if rank == 0 and result is not None:
        with open(result_path, "w") as f:
            json.dump(result, f)


def _run_rank(backend, main, args, **store_args):
    import torch
    import torch.distributed as dist

    # One compute thread per rank: ranks share the host's cores.
    torch.set_num_threads(int(os.environ.get("PYCOMM_BENCH_THREADS", "1")))
    dist.init_process_group(backend, **store_args)
    try:
        return main(args)
    finally:
        import pycomm

        pycomm.destroy()
        dist.destroy_process_group()


def launch(main, args, nproc: int, backend: str = "gloo"):
    """Runs main(args) on every rank: here if torchrun started us, else in `nproc` spawned
    processes. Returns what main returned: this rank's under torchrun; rank 0's (through a
    JSON file, so it must be JSON-able) when spawned, None if it returned nothing."""
    if under_torchrun():
        return _run_rank(backend, main, args)
    # Single-threaded BLAS in every rank, before torch is imported there.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    import torch.distributed as dist
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="pycomm-bench-") as tmp:
        result_path = os.path.join(tmp, "rank0.json")
        # Port 0: the system picks a free port and the store keeps it bound.
        store = dist.TCPStore("127.0.0.1", 0, nproc, is_master=True, wait_for_workers=False)
        mp.spawn(_rank_entry, args=(nproc, store.port, backend, main, args, result_path),
                 nprocs=nproc)
        del store
        if not os.path.exists(result_path):
            return None
        with open(result_path) as f:
            return json.load(f)


def run_in_session(cmd, timeout_s: float, **popen_args):
    """Runs cmd in a session of its own, so that a hang ends with every process it started
    (the ranks it spawned, mpirun's children): (returncode, stdout, stderr), with returncode
    None when it ran past timeout_s and its session was killed."""
    import signal
    import subprocess

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen_args)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return None, stdout, stderr
    return proc.returncode, stdout, stderr
