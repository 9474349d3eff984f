"""Open MPI through mpi4py on numpy buffers: the same collectives, sizes and checks as the
torch peers, timed in a launch of its own.

The torch ranks cannot host MPI (mpirun starts its own processes), so rank 0 writes a plan
(its kind, dtype, op, the timing budget, and per item the collective with its element
counts), runs bench/mpi_worker.py under `mpirun --allow-run-as-root --oversubscribe --bind-to none`,
and reads back per item the rounds' times and #wrong, while the other torch ranks wait in a
barrier (a sleeping wait). MPI's rounds are its own: they run before the other peers start,
not interleaved with them.

The calls, in place where torch's are: Allreduce (MPI.IN_PLACE), Bcast (root 0), Reduce
(root 0, MPI.IN_PLACE at the root), Allgather, Reduce_scatter_block, Alltoall. What MPI
lacks, said per row: no reduction on float16 or bfloat16 (Open MPI has no such datatype;
their data-movement collectives run as raw 2-byte words); no avg or premul_sum (timed as
MPI.SUM, no #wrong).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time

from ..checks import blocks
from ..collectives import COLLECTIVES, ROOT
from ..launch import run_in_session
from ..patterns import SENTINEL
from ..timing import per_call_median

HINT = "apt-get install -y openmpi-bin libopenmpi-dev && pip install mpi4py"
WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "mpi_worker.py")
# What the bench's dtypes are in numpy; float16 and bfloat16 move as 2-byte words.
NUMPY = {"float32": "float32", "float64": "float64", "float16": "uint16", "bfloat16": "uint16",
         "int8": "int8", "uint8": "uint8", "int32": "int32", "int64": "int64"}
_TORCH_RANKS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


# --------------------------------------------------------------------------- the torch side

def status(skip: bool):
    """(mpirun's path, None) or (None, why the column is absent)."""
    if skip:
        return None, "Open MPI column absent: --no-mpi"
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return None, f"Open MPI column absent: no mpirun on PATH (to add it: {HINT})"
    if importlib.util.find_spec("mpi4py") is None:
        return None, f"Open MPI column absent: mpi4py is not importable (to add it: {HINT})"
    return mpirun, None


def plan(kind: str, args, items, **facts) -> dict:
    """What the worker measures: kind ("collectives": serve below; "p2p": peers/mpi_p2p.py),
    the driver's dtype and timing budget, one item per measurement, and the kind's facts."""
    return dict(kind=kind, dtype=args.dtype, rounds=args.rounds, min_time=args.min_time,
                min_iters=args.min_iters, max_iters=args.max_iters, warmup=args.warmup,
                items=items, **facts)


def run_plan(mpirun: str, world_size: int, plan: dict, timeout_s: float):
    """Runs bench/mpi_worker.py under mpirun: ({(collective, size): its row}, meta) or
    ({}, why not)."""
    with tempfile.TemporaryDirectory(prefix="pycomm-bench-mpi-") as tmp:
        plan_path, out_path = os.path.join(tmp, "plan.json"), os.path.join(tmp, "out.json")
        with open(plan_path, "w") as f:
            json.dump(plan, f)
        # Not bound to cores, like the torch ranks; torch's rendezvous variables stay out.
        env = {k: v for k, v in os.environ.items() if k not in _TORCH_RANKS}
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-np", str(world_size), sys.executable, WORKER, "--plan", plan_path,
               "--out", out_path]
        rc, stdout, stderr = run_in_session(cmd, timeout_s, env=env)
        if rc is None:
            return {}, f"Open MPI column absent: mpirun did not finish in {timeout_s} s"
        if rc != 0 or not os.path.exists(out_path):
            tail = (stderr.strip() or stdout.strip()).splitlines()[-3:]
            return {}, f"Open MPI column absent: mpirun exited with {rc}: " + " | ".join(tail)
        with open(out_path) as f:
            out = json.load(f)
    return {(r["collective"], r["size"]): r for r in out["rows"]}, out.get("meta", {})


def column(world, skip: bool, plan: dict, timeout_s: float):
    """Rank 0 runs MPI's launch alone while the other ranks wait: ({(collective, size):
    row}, meta, the header's line) on rank 0; ({}, {}, None) elsewhere."""
    rows, meta, note = {}, {}, None
    if world.rank == 0:
        mpirun, note = status(skip)
        if mpirun:
            t0 = time.perf_counter()
            rows, meta = run_plan(mpirun, world.size, plan, timeout_s)
            if isinstance(meta, str):
                note, meta = meta, {}
            else:
                note = (f"mpi = Open MPI {meta.get('version', '?')} via mpi4py "
                        f"{meta.get('mpi4py', '?')} on numpy buffers, timed in its own mpirun "
                        f"launch ({time.perf_counter() - t0:.0f} s) before the others, not "
                        f"interleaved" + "".join(f"; {x}" for x in meta.get("notes", [])))
    world.dist.barrier()
    return rows, meta, note


# --------------------------------------------------------------------------- under mpirun

def _as_dtype(np, values, dtype: str):
    """Integer-valued numpy values in the bench dtype's representation."""
    if dtype == "float16":
        return np.asarray(values, np.float16).view(np.uint16)
    if dtype == "bfloat16":
        # bfloat16 is the top half of a float32; small integers are exact in both.
        return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.asarray(values).astype(NUMPY[dtype])


def _mpi_call(MPI, comm, name, op, inp, out):
    """The MPI call of one collective on numpy buffers, in place where torch's is."""
    if name == "reduce":
        if comm.Get_rank() == ROOT:
            return lambda: comm.Reduce(MPI.IN_PLACE, out, op=op, root=ROOT)
        return lambda: comm.Reduce(out, None, op=op, root=ROOT)
    return {"all_reduce": lambda: comm.Allreduce(MPI.IN_PLACE, out, op=op),
            "broadcast": lambda: comm.Bcast(out, root=ROOT),
            "all_gather": lambda: comm.Allgather(inp, out),
            "reduce_scatter": lambda: comm.Reduce_scatter_block(inp, out, op=op),
            "all_to_all": lambda: comm.Alltoall(inp, out)}[name]


def _count_wrong(np, MPI, comm, coll, item, plan, inp, out, fn):
    """#wrong of one call on the check pattern, summed over the ranks."""
    dtype, op = plan["dtype"], plan["op"]
    rank, n = comm.Get_rank(), comm.Get_size()
    target = out if coll.in_place else inp
    for start, stop in blocks(target.size):
        idx = np.arange(start, stop, dtype=np.int64)
        target[start:stop] = _as_dtype(np, coll.input_values(rank, idx, n, op), dtype)
    if not coll.in_place or (coll.rooted and not coll.reduces and rank != ROOT):
        out[:] = _as_dtype(np, np.full(out.size, SENTINEL), dtype)
    fn()
    wrong = 0
    if coll.checked_on(rank):
        for start, stop in blocks(out.size):
            idx = np.arange(start, stop, dtype=np.int64)
            want = _as_dtype(np, coll.expected(rank, idx, n, item["count"], op, np), dtype)
            wrong += int(np.count_nonzero(out[start:stop] != want))
    return comm.allreduce(wrong, op=MPI.SUM)


def serve(plan: dict) -> dict:
    """Runs a plan on this MPI rank: {"meta", "rows"} (meta on rank 0 only)."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    dtype, op_name = plan["dtype"], plan["op"]
    ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "product": MPI.PROD}
    op, exact_op = ops.get(op_name, MPI.SUM), op_name in ops
    notes = []
    if not exact_op:
        notes.append(f"MPI has no {op_name}: its reductions time MPI.SUM (no #wrong)")
    no_reduction = dtype in ("float16", "bfloat16")
    if no_reduction:
        notes.append(f"Open MPI has no {dtype} reduction: no MPI all_reduce, reduce, "
                     f"reduce_scatter")
    budget = plan["min_time"] / max(plan["rounds"], 1)
    rows = []
    for item in plan["items"]:
        coll = COLLECTIVES[item["collective"]]
        row = dict(collective=coll.name, size=item["size"], rounds_us=[], wrong=None, note=None)
        rows.append(row)
        if coll.reduces and no_reduction:
            row["note"] = f"no {dtype} reduction in Open MPI"
            continue
        inp = np.zeros(item["in_numel"], dtype=NUMPY[dtype])
        out = inp if coll.in_place else np.zeros(item["out_numel"], dtype=NUMPY[dtype])
        fn = _mpi_call(MPI, comm, coll.name, op, inp, out)
        row["rounds_us"] = [1e6 * per_call_median(
            fn, budget, plan["min_iters"], plan["max_iters"], plan["warmup"],
            agree=lambda k: comm.bcast(k, root=0),
            slowest=lambda s: comm.allreduce(s, op=MPI.MAX)) for _ in range(plan["rounds"])]
        if exact_op or not coll.reduces:
            row["wrong"] = _count_wrong(np, MPI, comm, coll, item, plan, inp, out, fn)
        del inp, out
    return dict(meta=library_meta(comm, notes), rows=rows)


def library_meta(comm, notes) -> dict:
    """Rank 0's facts about the MPI library ({} on the other ranks)."""
    import mpi4py
    from mpi4py import MPI

    if comm.Get_rank() != 0:
        return {}
    library = MPI.Get_library_version().strip().splitlines()[0]
    return dict(version=library.split(",")[0].replace("Open MPI v", "") if "Open MPI" in
                library else library, mpi_standard=".".join(map(str, MPI.Get_version())),
                mpi4py=mpi4py.__version__, library=library, ranks=comm.Get_size(),
                notes=notes)
