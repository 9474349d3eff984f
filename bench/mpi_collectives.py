#!/usr/bin/env python
"""Open MPI's column of bench/collectives_perf.py: the same collectives and sizes with
mpi4py on numpy buffers, under mpirun.

    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \\
        python bench/mpi_collectives.py --plan plan.json --out mpi.json

collectives_perf.py writes the plan (dtype, op, timing budget, and per item the
collective with its element counts) and merges the medians this writes. The calls, in
place where torch's are: Allreduce (MPI.IN_PLACE), Bcast (root 0), Reduce (root 0,
MPI.IN_PLACE at the root), Allgather, Reduce_scatter_block, Alltoall.

Timing is collectives_perf.py's: each call timed on its own, a rank's median, the slowest
rank's median per round, the median of the rounds and their spread. The rounds here are
MPI's alone: this launch runs before the torch ranks measure, not interleaved with them.
#wrong: one call on collectives_perf.py's integer-valued pattern, compared with its exact
reference, summed over the ranks (for Reduce, the root's).

What MPI lacks, said per row: no reduction on float16 or bfloat16 (Open MPI has no such
MPI datatype; their data-movement collectives run as raw 2-byte words); no avg or
premul_sum (timed as MPI.SUM, no #wrong).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collectives_perf import CHECK_BLOCK, REDUCING, SENTINEL, expected, input_values  # noqa: E402

# numpy dtypes of the bench's dtypes; float16 and bfloat16 move as 2-byte words.
NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.uint16,
         "bfloat16": np.uint16, "int8": np.int8, "uint8": np.uint8, "int32": np.int32,
         "int64": np.int64}


def to_dtype(values, dtype: str):
    """Integer-valued numpy values in the bench dtype's representation."""
    if dtype == "float16":
        return np.asarray(values, np.float16).view(np.uint16)
    if dtype == "bfloat16":
        # bfloat16 is the top half of a float32; small integers are exact in both.
        return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.asarray(values).astype(NUMPY[dtype])


def mpi_op(MPI, op: str):
    """(MPI op, whether it is the op asked for)."""
    ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "product": MPI.PROD}
    return (ops[op], True) if op in ops else (MPI.SUM, False)


def calls(MPI, comm, collective, op, root, inp, out):
    """The MPI call of one collective on numpy buffers, in place where torch's is."""
    rank = comm.Get_rank()
    if collective == "all_reduce":
        return lambda: comm.Allreduce(MPI.IN_PLACE, out, op=op)
    if collective == "broadcast":
        return lambda: comm.Bcast(out, root=root)
    if collective == "reduce":
        if rank == root:
            return lambda: comm.Reduce(MPI.IN_PLACE, out, op=op, root=root)
        return lambda: comm.Reduce(out, None, op=op, root=root)
    if collective == "all_gather":
        return lambda: comm.Allgather(inp, out)
    if collective == "reduce_scatter":
        return lambda: comm.Reduce_scatter_block(inp, out, op=op)
    if collective == "all_to_all":
        return lambda: comm.Alltoall(inp, out)
    raise ValueError(f"collective: unknown {collective!r}")


def time_calls(MPI, comm, fn, plan):
    """The slowest rank's median seconds per call (collectives_perf.Timer.calls)."""
    for _ in range(plan["warmup"]):
        fn()
    clock = time.perf_counter
    t0 = clock()
    fn()
    first = clock() - t0
    budget = plan["min_time"] / max(plan["rounds"], 1)
    n = min(plan["max_iters"], max(plan["min_iters"], int(budget / max(first, 1e-7))))
    n = comm.bcast(n, root=0)
    samples = []
    for _ in range(n):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return comm.allreduce(statistics.median(samples), op=MPI.MAX)


def count_wrong(MPI, comm, item, plan, inp, out, fn):
    collective, dtype, op = item["collective"], plan["dtype"], plan["op"]
    rank, n, root = comm.Get_rank(), comm.Get_size(), plan["root"]
    separate = collective in ("all_gather", "reduce_scatter", "all_to_all")
    target = inp if separate else out  # in place: one buffer
    for start in range(0, target.size, CHECK_BLOCK):
        idx = np.arange(start, min(target.size, start + CHECK_BLOCK), dtype=np.int64)
        target[start:start + idx.size] = to_dtype(input_values(collective, rank, idx, n, op), dtype)
    if separate or (collective == "broadcast" and rank != root):
        out[:] = to_dtype(np.full(out.size, SENTINEL), dtype)
    fn()
    wrong = 0
    if not (collective == "reduce" and rank != root):
        for start in range(0, out.size, CHECK_BLOCK):
            idx = np.arange(start, min(out.size, start + CHECK_BLOCK), dtype=np.int64)
            want = to_dtype(expected(collective, rank, idx, n, item["count"], op, np), dtype)
            wrong += int(np.count_nonzero(out[start:start + idx.size] != want))
    return comm.allreduce(wrong, op=MPI.SUM)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="JSON written by collectives_perf.py")
    p.add_argument("--out", required=True, help="where rank 0 writes the results (JSON)")
    args = p.parse_args(argv)
    from mpi4py import MPI
    import mpi4py

    comm = MPI.COMM_WORLD
    with open(args.plan) as f:
        plan = json.load(f)
    dtype, op_name, root = plan["dtype"], plan["op"], plan["root"]
    op, exact_op = mpi_op(MPI, op_name)
    notes = []
    if not exact_op:
        notes.append(f"MPI has no {op_name}: its reductions time MPI.SUM (no #wrong)")
    no_reduction = dtype in ("float16", "bfloat16")
    if no_reduction:
        notes.append(f"Open MPI has no {dtype} reduction: no MPI all_reduce, reduce, "
                     f"reduce_scatter")
    rows = []
    for item in plan["items"]:
        collective = item["collective"]
        row = dict(collective=collective, size=item["size"], rounds_us=[], wrong=None, note=None)
        rows.append(row)
        if collective in REDUCING and no_reduction:
            row["note"] = f"no {dtype} reduction in Open MPI"
            continue
        inp = np.zeros(item["in_numel"], dtype=NUMPY[dtype])
        out = inp if collective in ("all_reduce", "broadcast", "reduce") else \
            np.zeros(item["out_numel"], dtype=NUMPY[dtype])
        fn = calls(MPI, comm, collective, op, root, inp, out)
        rounds = [time_calls(MPI, comm, fn, plan) for _ in range(plan["rounds"])]
        row["rounds_us"] = [t * 1e6 for t in rounds]
        if exact_op or collective not in REDUCING:
            row["wrong"] = count_wrong(MPI, comm, item, plan, inp, out, fn)
        del inp, out
    if comm.Get_rank() == 0:
        version = ".".join(map(str, MPI.Get_version()))
        library = MPI.Get_library_version().strip().splitlines()[0]
        meta = dict(version=library.split(",")[0].replace("Open MPI v", "") if "Open MPI" in
                    library else library, mpi_standard=version, mpi4py=mpi4py.__version__,
                    library=library, ranks=comm.Get_size(), notes=notes)
        with open(args.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f)


if __name__ == "__main__":
    main()
