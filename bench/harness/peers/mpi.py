"""Open MPI through mpi4py on numpy buffers: the same collectives, sizes and checks as the
torch peers, measured one of two ways, which the header line names.

In turns (where the launch allows). The bench starts its ranks with `mpirun
--allow-run-as-root --oversubscribe --bind-to none -np N` (jointly() below, for
harness.launch): each rank is an MPI rank and a torch rank at once (harness.launch.
_mpirun_rank), so Open MPI is one more peer of the sweep, called on numpy views of the very
tensors the others use, timed round by round with them and checked by the same check.

In a launch of its own (the fallback: mpirun or mpi4py missing, ranks started by torchrun,
or a joint launch that did not come up). Rank 0 writes a plan (its kind, dtype, op, the
timing budget, and per item the collective with its element counts), runs
bench/mpi_worker.py under mpirun with the same options, and reads back per item the rounds'
times and #wrong, while the other torch ranks wait in a barrier (a sleeping wait). MPI's
rounds are then its own: they run before the other peers start, not interleaved with them.

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
import subprocess
import sys
import tempfile
import time

from .. import launch
from ..checks import blocks
from ..collectives import COLLECTIVES, ROOT
from ..launch import TORCH_RANKS, run_in_session
from ..patterns import SENTINEL
from ..timing import per_call_median
from .peer import Peer

HINT = "apt-get install -y openmpi-bin libopenmpi-dev && pip install mpi4py"
WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "mpi_worker.py")
# What the bench's dtypes are in numpy; float16 and bfloat16 move as 2-byte words.
NUMPY = {"float32": "float32", "float64": "float64", "float16": "uint16", "bfloat16": "uint16",
         "int8": "int8", "uint8": "uint8", "int32": "int32", "int64": "int64"}
# Every mpirun of the benches: not bound to cores, like the spawned torch ranks.
MPIRUN_OPTIONS = ("--allow-run-as-root", "--oversubscribe", "--bind-to", "none")
# mpirun is run by its name, found on PATH, as a user types it: run by its absolute path,
# Open MPI acts as if given --prefix and puts its own bin and lib directories first on the
# ranks' PATH and LD_LIBRARY_PATH, so that a rank would find other tools than the user's
# (/usr/bin/ninja before the Python environment's: torch's JIT builds, DeepSpeed's op
# among them, were then remade on every run).
MPIRUN = "mpirun"
# Seconds a joint launch's ranks may take to come up (import torch, MPI_Init, the torch
# group) before the bench falls back to spawned ranks and MPI's own launch.
JOINT_START_S = 180.0


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


def run_plan(world_size: int, plan: dict, timeout_s: float):
    """Runs bench/mpi_worker.py under mpirun: ({(collective, size): its row}, meta) or
    ({}, why not)."""
    with tempfile.TemporaryDirectory(prefix="pycomm-bench-mpi-") as tmp:
        plan_path, out_path = os.path.join(tmp, "plan.json"), os.path.join(tmp, "out.json")
        with open(plan_path, "w") as f:
            json.dump(plan, f)
        # torch's rendezvous variables stay out.
        env = {k: v for k, v in os.environ.items() if k not in TORCH_RANKS}
        cmd = [MPIRUN, *MPIRUN_OPTIONS, "-np", str(world_size), sys.executable, WORKER,
               "--plan", plan_path, "--out", out_path]
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
            rows, meta = run_plan(world.size, plan, timeout_s)
            if isinstance(meta, str):
                note, meta = meta, {}
            else:
                note = (f"mpi = Open MPI {meta.get('version', '?')} via mpi4py "
                        f"{meta.get('mpi4py', '?')} on numpy buffers, timed in its own mpirun "
                        f"launch ({time.perf_counter() - t0:.0f} s) before the others, not "
                        f"interleaved" + "".join(f"; {x}" for x in meta.get("notes", [])))
    world.dist.barrier()
    return rows, meta, note


def jointly(argv, start_timeout_s: float = JOINT_START_S):
    """harness.launch's `jointly`: fn(nproc) that runs `python argv...` (this bench's own
    command) on nproc ranks under mpirun, so that Open MPI is timed in the same processes,
    in turns. The ranks' output goes straight to this process's; their stderr is copied
    here as it comes. Returns (True, rank 0's result) once the ranks came up and ended well;
    ends this process with their status where they came up and failed; and (False, why)
    where they did not come up (mpirun or mpi4py missing, mpirun failing at start, or no
    rank up within start_timeout_s), for the caller to start its ranks another way."""
    def run(nproc: int):
        found, why = status(False)
        if found is None:
            return False, why
        with tempfile.TemporaryDirectory(prefix="pycomm-bench-mpirun-") as tmp:
            started, result = os.path.join(tmp, "started"), os.path.join(tmp, "result.json")
            env = {k: v for k, v in os.environ.items() if k not in TORCH_RANKS}
            env.update({launch.STARTED_ENV: started, launch.RESULT_ENV: result,
                        "PYTHONUNBUFFERED": "1"})
            cmd = [MPIRUN, *MPIRUN_OPTIONS, "-np", str(nproc), sys.executable, *argv]
            sys.stdout.flush()
            with open(os.path.join(tmp, "stderr"), "w+b") as err:
                # In this process's session: whoever ends it ends mpirun and the ranks too.
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=err, env=env)
                try:
                    rc, up = _wait_joint(proc, started, err, start_timeout_s)
                except BaseException:
                    _stop(proc)
                    raise
                if not up:
                    err.seek(0)
                    tail = " | ".join(err.read().decode(errors="replace").strip()
                                      .splitlines()[-3:])
                    return False, (f"its ranks were not up within {start_timeout_s:.0f} s"
                                   if rc is None else
                                   f"mpirun exited with {rc} before its ranks were up"
                                   + (f": {tail}" if tail else ""))
            if rc != 0:
                raise SystemExit(rc)
            if not os.path.exists(result):
                return True, None
            with open(result) as f:
                return True, json.load(f)
    return run


def _wait_joint(proc, started: str, err, start_timeout_s: float):
    """(mpirun's exit status or None, whether the ranks came up): waits for the ranks to
    come up (stopping mpirun where they do not in time), then for mpirun to end, copying
    the ranks' stderr (err: a binary file) to this process's as it grows, twice a second
    (the ranks are measuring: this process wakes seldom)."""
    import time

    deadline = time.monotonic() + start_timeout_s
    while not os.path.exists(started):
        if proc.poll() is not None:
            return proc.returncode, os.path.exists(started)
        if time.monotonic() > deadline:
            _stop(proc)
            return None, False
        time.sleep(0.05)
    shown = 0
    while True:
        rc = proc.poll()
        err.seek(shown)
        data = err.read()
        if data:
            sys.stderr.flush()
            sys.stderr.buffer.write(data)
            sys.stderr.buffer.flush()
            shown += len(data)
        if rc is not None:
            return rc, True
        time.sleep(0.5)


def _stop(proc):
    """Ends mpirun, which ends its ranks."""
    import subprocess as sp

    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except sp.TimeoutExpired:
            proc.kill()
            proc.wait()


class Side:
    """Open MPI's column as the bench has it: `peer`, a column timed in turns with the others
    (the ranks are MPI ranks; its note is the header's line), or `rows`, its own launch's
    rows by (collective, size); `meta` (rank 0's facts about the library) and `note`, the
    header's line where there is no peer."""

    def __init__(self, peer=None, rows=None, meta=None, note=None):
        self.peer, self.rows, self.meta, self.note = peer, rows or {}, meta or {}, note

    @property
    def present(self) -> bool:
        """Whether the tables have an MPI column (on rank 0, which prints them)."""
        return self.peer is not None or bool(self.rows)

    def join(self, peers: list, lines: list) -> None:
        """Adds the column to a driver's peers (timed in turns), or its note to the header's
        lines (a launch of its own, or why there is no column)."""
        if self.peer is not None:
            peers.append(self.peer)
        if self.note:
            lines.append(self.note)


def side(world, skip: bool, plan_of, make_peer, timeout_s: float) -> Side:
    """Open MPI's column, in turns where the ranks are MPI ranks (make_peer(world, comm) ->
    its Peer), else through its own launch of plan_of() (column()); the header's line says
    which, and why not in turns."""
    if skip:
        return Side(note=status(True)[1])
    if launch.ranks_are_mpi_ranks():
        from mpi4py import MPI

        peer, err = world.on_every_rank(lambda: make_peer(world, MPI.COMM_WORLD))
        if err:
            return Side(note=f"Open MPI column absent: its calls in these ranks failed: {err}")
        meta = library_meta(MPI.COMM_WORLD, peer.notes)
        meta["in_turns"] = True
        # The peer's note is the header's line (the drivers print every peer's).
        peer.note = (
            f"mpi = Open MPI {meta.get('version', '?')} via mpi4py {meta.get('mpi4py', '?')} "
            f"in the bench's own ranks (one `mpirun {' '.join(MPIRUN_OPTIONS)} -np "
            f"{world.size}` launch), on numpy views of the same tensors, timed in turns with "
            f"the others" + "".join(f"; {x}" for x in peer.notes))
        return Side(peer=peer, meta=meta)
    rows, meta, note = column(world, skip, plan_of(), timeout_s)
    joint = os.environ.get(launch.NOT_JOINT_ENV)
    if rows and world.rank == 0:
        meta["in_turns"] = False
        why = joint or ("the ranks were started by torchrun, not mpirun"
                        if launch.under_torchrun() else "the ranks were not started by mpirun")
        note += f" (not in turns: {why})"
    elif note and joint and joint != note:
        note += f" (nor in turns: {joint})"
    return Side(rows=rows, meta=meta, note=note)


def same_world(world, comm):
    """Refuses an MPI communicator whose ranks are not the torch world's, rank for rank."""
    if comm.Get_size() != world.size or comm.Get_rank() != world.rank:
        raise RuntimeError(f"MPI rank {comm.Get_rank()} of {comm.Get_size()} is torch rank "
                           f"{world.rank} of {world.size}")


def numpy_view(t):
    """A numpy array sharing a CPU tensor's memory; float16 and bfloat16 as 2-byte words
    (NUMPY), which Open MPI moves but cannot reduce."""
    import torch

    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().view("uint16")
    return t.numpy()


def on_views(make):
    """fn(*tensors): make(*numpy views of them)() , the views made once per set of tensors
    (the sweep calls one set many times), so that a timed call is MPI's call alone. The
    tensors are held while their views are, so that no other tensor can take their place."""
    held = [None, None]

    def call(*tensors):
        last = held[0]
        if last is None or len(last) != len(tensors) or any(
                a is not b for a, b in zip(last, tensors)):
            held[0], held[1] = tensors, make(*tensors)
        return held[1]()
    return call


def collectives_peer(world, comm, dtype: str, op_name: str) -> Peer:
    """Open MPI's column of the collectives, in these ranks: each collective's call
    (_mpi_call) on numpy views of the sweep's tensors. What MPI lacks is left out, in
    `notes`: no float16 or bfloat16 reduction, no avg or premul_sum (timed as MPI.SUM, no
    #wrong)."""
    from mpi4py import MPI

    same_world(world, comm)
    ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "product": MPI.PROD}
    op, exact_op = ops.get(op_name, MPI.SUM), op_name in ops
    p = Peer("mpi", "mpi", "")
    p.notes = []
    if not exact_op:
        p.notes.append(f"MPI has no {op_name}: its reductions time MPI.SUM (no #wrong)")
    no_reduction = dtype in ("float16", "bfloat16")
    if no_reduction:
        p.notes.append(f"Open MPI has no {dtype} reduction: no MPI all_reduce, reduce, "
                       f"reduce_scatter")
    for name, coll in COLLECTIVES.items():
        if coll.reduces and no_reduction:
            continue
        p.calls[name] = on_views(lambda i, o, name=name: _mpi_call(
            MPI, comm, name, op, numpy_view(i), numpy_view(o)))
        p.exact[name] = exact_op or not coll.reduces
    p.settle = comm.Barrier
    return p


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
