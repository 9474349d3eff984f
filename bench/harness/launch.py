"""How the benchmarks start their ranks: under torchrun (RANK and WORLD_SIZE set), under
mpirun (OMPI_COMM_WORLD_RANK set: each rank is an MPI rank too, so a bench can time Open MPI
in the same processes, in turns with the torch peers), or as local processes they spawn
themselves; and how rank 0's result reaches the process that started them."""
from __future__ import annotations

import json
import os
import sys
import tempfile

# Set by the launch for the ranks it starts under mpirun: where rank 0 writes, once every
# rank has joined the torch group, that they are up (the joint launch has started), and
# where it writes its result.
STARTED_ENV = "PYCOMM_BENCH_MPIRUN_STARTED"
RESULT_ENV = "PYCOMM_BENCH_MPIRUN_RESULT"
# Set for spawned ranks when a joint mpirun launch was wanted and did not happen: why.
NOT_JOINT_ENV = "PYCOMM_BENCH_NOT_UNDER_MPIRUN"
# The variables of torch's rendezvous, which a launch of ranks must not inherit.
TORCH_RANKS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")

# Whether this process is an MPI rank of the bench's own world (set by _mpirun_rank).
_mpi_world = False


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def under_mpirun() -> bool:
    """Started by mpirun (Open MPI's variables) and not by torchrun."""
    return "OMPI_COMM_WORLD_RANK" in os.environ and not under_torchrun()


def ranks_are_mpi_ranks() -> bool:
    """Whether this rank is also rank RANK of MPI's COMM_WORLD, of the same size (the ranks
    were started by mpirun): Open MPI can then be timed here, in turns with the others."""
    return _mpi_world


def _rank_entry(rank, world_size, port, backend, main, args, result_path):
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    # A client of the store the launching process holds open: no port to race for.
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False)
    result = _run_rank(backend, main, args, store=store, rank=rank, world_size=world_size)
    if rank == 0 and result is not None:
        with open(result_path, "w") as f:
            json.dump(result, f)


def _run_rank(backend, main, args, on_ready=None, **store_args):
    import torch
    import torch.distributed as dist

    # One compute thread per rank: ranks share the host's cores.
    torch.set_num_threads(int(os.environ.get("PYCOMM_BENCH_THREADS", "1")))
    dist.init_process_group(backend, **store_args)
    try:
        if on_ready is not None:
            on_ready()
        return main(args)
    finally:
        import pycomm

        pycomm.destroy()
        dist.destroy_process_group()


def _mpirun_rank(backend, main, args):
    """One rank started by mpirun: its rank, size and local rank from Open MPI's variables,
    MPI initialised (mpi4py) before torch's group, whose store rank 0 opens on a free port
    and whose port MPI hands the others (MASTER_ADDR and MASTER_PORT are set to it, unless
    given). An exception on any rank aborts the whole MPI job, as a failed spawned rank
    ends the others."""
    global _mpi_world
    import traceback

    import torch.distributed as dist
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    if (comm.Get_rank(), comm.Get_size()) != (rank, size):
        raise RuntimeError(f"mpirun's variables say rank {rank} of {size}, MPI says "
                           f"{comm.Get_rank()} of {comm.Get_size()}")
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size),
                      LOCAL_RANK=os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", str(rank)),
                      LOCAL_WORLD_SIZE=os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", str(size)))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    store = None
    if "MASTER_PORT" not in os.environ:
        if rank == 0:
            store = dist.TCPStore(os.environ["MASTER_ADDR"], 0, size, is_master=True,
                                  wait_for_workers=False)
        port = comm.bcast(store.port if store is not None else None, root=0)
        os.environ["MASTER_PORT"] = str(port)
        if store is None:
            store = dist.TCPStore(os.environ["MASTER_ADDR"], port, size, is_master=False)
    store_args = dict(store=store, rank=rank, world_size=size) if store is not None else {}
    _mpi_world = True

    def ready():
        dist.barrier()
        if rank == 0 and os.environ.get(STARTED_ENV):
            with open(os.environ[STARTED_ENV], "w") as f:
                f.write("up\n")

    try:
        result = _run_rank(backend, main, args, on_ready=ready, **store_args)
    except BaseException:  # noqa: BLE001 - every rank must end, not wait on this one
        traceback.print_exc()
        sys.stderr.flush()
        sys.stdout.flush()
        comm.Abort(1)
        raise
    if rank == 0 and result is not None and os.environ.get(RESULT_ENV):
        with open(os.environ[RESULT_ENV], "w") as f:
            json.dump(result, f)
    return result


def launch(main, args, nproc: int, backend: str = "gloo", jointly=None):
    """Runs main(args) on every rank: here if torchrun or mpirun started us, else in `nproc`
    ranks started here: first through jointly(nproc) where given (a launch of this command
    under mpirun, which returns (ran, rank 0's result or why it could not start); ranks
    that started and failed end this process with their exit status), else, or where that
    could not start, as spawned processes. Returns what main returned: this rank's under
    torchrun or mpirun; rank 0's (through a JSON file, so it must be JSON-able) when started
    here, None if it returned nothing."""
    if under_torchrun():
        return _run_rank(backend, main, args)
    if under_mpirun():
        return _mpirun_rank(backend, main, args)
    # Single-threaded BLAS in every rank, before torch is imported there.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    if jointly is not None:
        ran, out = jointly(nproc)
        if ran:
            return out
        os.environ[NOT_JOINT_ENV] = out
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


def add_rank_job_options(parser) -> None:
    """The hidden options of a bench that is its own rank job: torchrun_rank_job starts it
    with --rank-job (run as one rank) and --out (where rank 0's result goes)."""
    import argparse

    parser.add_argument("--rank-job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)


def rank_job_result(path: str, result) -> None:
    """In every rank of a rank job: rank 0 hands `result` (JSON) to torchrun_rank_job,
    through `path`; the other ranks' results are not read."""
    if os.environ.get("RANK", "0") != "0":
        return
    with open(path, "w") as f:
        json.dump(result, f)


class RankJobFailed(SystemExit):
    """A rank job whose launch failed, or left no result: its exit status (None when it ran
    past its time) and the launch's stderr, both in the message."""

    def __init__(self, what: str, rc, stderr: str):
        super().__init__(f"{what} failed (rc {rc}):\n{stderr[-3000:]}")
        self.rc, self.stderr = rc, stderr


def torchrun_rank_job(script: str, args, nproc: int, timeout_s: float, what: str = ""):
    """Starts `script --rank-job --out FILE ARGS` as nproc ranks under torchrun on this host
    (OMP_NUM_THREADS=1) and returns what rank 0 wrote to FILE (rank_job_result): how a bench
    that is its own rank job runs itself. RankJobFailed, naming the launch as `what` (by
    default "<script's name>: the launch"), when it fails."""
    out = tempfile.mktemp(suffix=".json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           os.path.abspath(script), "--rank-job", "--out", out, *map(str, args)]
    rc, _, stderr = run_in_session(cmd, timeout_s, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        if rc != 0 or not os.path.exists(out):
            name = os.path.basename(script).removesuffix(".py")
            raise RankJobFailed(what or f"{name}: the launch", rc, stderr)
        with open(out) as f:
            return json.load(f)
    finally:
        if os.path.exists(out):
            os.remove(out)
