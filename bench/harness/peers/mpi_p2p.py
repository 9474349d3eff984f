"""Open MPI's column of bench/p2p_perf.py: harness.p2p's patterns with mpi4py on numpy
buffers, in the bench's own ranks where mpirun started them (peer(): timed in turns with the
others), else in a launch of its own (serve(), under bench/mpi_worker.py), as peers/mpi.py
runs the collectives.

The plan: the dtype, the timing budget, and per item the pattern with its layout (count,
size, window, check_window). Per item this returns the rounds' times per unit (half a round
trip, one message of a window, one exchange: p2p.Pattern.per_call), timed as every peer is
(harness.timing.per_call_median: a rank's median, the slowest rank's per round), and #wrong
on distinct patterned buffers, summed over the ranks."""
from __future__ import annotations

from ..p2p import PATTERNS, Buffers, buffers, count_wrong, fill_for_check
from ..timing import per_call_median
from .mpi import NUMPY, library_meta, numpy_view, on_views, same_world
from .peer import Peer


def peer(world, comm) -> Peer:
    """Open MPI's column in these ranks (the bench started them under mpirun), timed in turns
    with the others: each pattern's mpi4py calls on numpy views of the sweep's torch
    buffers, checked by the same check."""
    from mpi4py import MPI

    same_world(world, comm)

    def on_numpy(call):
        def bind(b):
            views = Buffers(send=[numpy_view(t) for t in b.send],
                            recv=[numpy_view(t) for t in b.recv], ack=numpy_view(b.ack))
            return lambda: call(views)
        return on_views(bind)

    p = Peer("mpi", "mpi", "")
    p.notes = []
    p.calls = {name: on_numpy(pattern.mpi_call(MPI, comm)) for name, pattern in PATTERNS.items()}
    p.exact = {name: True for name in PATTERNS}
    p.settle = comm.Barrier
    return p


def serve(plan: dict) -> dict:
    """Runs a plan on this MPI rank: {"meta", "rows"} (meta on rank 0 only)."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    dtype = NUMPY[plan["dtype"]]
    budget = plan["min_time"] / max(plan["rounds"], 1)

    def zeros(n):
        return np.zeros(n, dtype=dtype)

    # A few calls of each pattern first (connections, page faults), as the torch peers get.
    for name in dict.fromkeys(item["pattern"] for item in plan["items"]):
        b = buffers(PATTERNS[name], zeros, 256, rank, 4, distinct=False)
        call = PATTERNS[name].mpi_call(MPI, comm)
        for _ in range(20):
            call(b)
    rows = []
    for item in plan["items"]:
        pattern = PATTERNS[item["pattern"]]
        call = pattern.mpi_call(MPI, comm)
        units = pattern.per_call(item["window"])
        bufs = buffers(pattern, zeros, item["count"], rank, item["window"], distinct=False)
        rounds_us = [1e6 / units * per_call_median(
            lambda: call(bufs), budget, plan["min_iters"], plan["max_iters"], plan["warmup"],
            agree=lambda k: comm.bcast(k, root=0),
            slowest=lambda s: comm.allreduce(s, op=MPI.MAX)) for _ in range(plan["rounds"])]
        b = buffers(pattern, zeros, item["count"], rank, item["check_window"], distinct=True)
        fill_for_check(np, b, rank)
        call(b)
        wrong = comm.allreduce(count_wrong(np, b, rank), op=MPI.SUM)
        rows.append(dict(collective=pattern.collective, size=item["size"], rounds_us=rounds_us,
                         wrong=wrong, note=None))
    return dict(meta=library_meta(comm, []), rows=rows)
