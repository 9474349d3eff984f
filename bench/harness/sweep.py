"""One size of a collective sweep on the ranks of the default group: the peers timed in
turns, round after round, beside the copy ceiling, then each peer's exact check.

Time. Each call is timed on its own; a rank's time is the median of its calls (their number
set by rank 0's first estimate and shared, so that every rank makes the same calls), and the
time of a round is the slowest rank's median. The time reported is the median of the rounds;
the spread, (slowest - fastest round) / median. #wrong: after the timing, each peer runs the
collective once on the check pattern, and the ranks' wrong elements are summed."""
from __future__ import annotations

import statistics

from pycomm.tools import results_schema as schema

from .ceilings import CopyCeiling, ceiling_bytes
from .collectives import check
from .peers import torch_floor
from .sizes import human
from .table import Column
from .timing import per_call_median, summarize

# A row's flag: Open MPI was timed in the bench's own ranks, in turns with the other peers.
MPI_IN_TURNS = "mpi_in_turns"


class Sweep:
    """The settings of a sweep: the dtype and op, --rounds, --min-time (seconds of calls per
    size and peer, over all rounds), --min-iters, --max-iters, --warmup; `barrier` aligns the
    ranks before each ceiling copy."""

    def __init__(self, world, dtype: str, op: str, rounds: int, min_time: float,
                 min_iters: int, max_iters: int, warmup: int, barrier, device=None):
        self.world, self.dtype_name, self.op = world, dtype, op
        self.dtype = getattr(world.torch, dtype)
        self.esize = world.torch.empty((), dtype=self.dtype).element_size()
        self.rounds, self.budget_s = rounds, min_time / max(rounds, 1)
        self.min_iters, self.max_iters, self.warmup = min_iters, max_iters, warmup
        # None: no copy ceiling (barrier unused), for a sweep that only calibrates.
        self.barrier = barrier
        self.device = device

    def seconds_per_call(self, fn, settle=None) -> float:
        """settle: run on every rank after the timed calls (Peer.settle)."""
        w = self.world

        def slowest(s):
            if settle is not None:
                settle()
            return w.max_over_ranks([s])[0]

        return per_call_median(fn, self.budget_s, self.min_iters, self.max_iters, self.warmup,
                               agree=w.from_rank0, slowest=slowest)

    def measure(self, coll, size: int, active):
        """Times the active peers on one size in turns, then checks them: (layout,
        {peer key: [seconds per round]}, [ceiling seconds per round], {peer key: #wrong}).
        A peer that fails on any rank is dropped for the rest of this collective, with its
        error."""
        w, torch = self.world, self.world.torch
        lay = coll.layout(size, self.esize, w.size)
        inp = torch.zeros(lay["in_numel"], dtype=self.dtype, device=self.device)
        out = inp if coll.in_place else torch.zeros(lay["out_numel"], dtype=self.dtype,
                                                    device=self.device)
        ceiling = (CopyCeiling(ceiling_bytes(lay["size"], coll.busbw_factor(w.size)), self.barrier)
                   if self.barrier is not None else None)
        times, t_ceiling = self.timed_rounds(coll.name, active, lay, lambda call: call(inp, out),
                                             ceiling)
        wrong = self.checked(coll.name, active, times, lay,
                             lambda call: check(coll, call, inp, out, w.rank, w.size, self.op,
                                                lay["count"]),
                             lambda p: p.exact.get(coll.name, True))
        return lay, times, t_ceiling, wrong

    def timed_rounds(self, name, active, lay, run, ceiling, units: int = 1):
        """({peer key: [seconds per unit, per round]}, [ceiling seconds per round]): each
        round times every active peer's run(call) in turn, then the ceiling (None: none)."""
        w = self.world
        times = {p.key: [] for p in active}
        t_ceiling = []
        for _ in range(self.rounds):
            for p in active:
                if not p.offers(name):
                    continue
                call = p.calls[name]
                t, err = w.on_every_rank(lambda: self.seconds_per_call(lambda: run(call), p.settle))
                if err:
                    p.failed[name] = f"{human(lay['size'])}: {err}"
                    times[p.key] = []
                else:
                    times[p.key].append(t / units)
            if ceiling is not None:
                t_ceiling.append(self.ceiling_seconds(ceiling))
        return times, t_ceiling

    def ceiling_seconds(self, ceiling) -> float:
        w = self.world
        return ceiling.measure(self.warmup, max(self.min_iters, 20),
                               lambda s: w.max_over_ranks([s])[0])

    def checked(self, name, active, times, lay, wrong_of, exact=lambda p: True) -> dict:
        """{peer key: #wrong over the ranks} of one checked call each (wrong_of(call): this
        rank's count); a peer whose check fails is dropped, with its error."""
        w, wrong = self.world, {}
        for p in active:
            if not p.offers(name) or not exact(p):
                continue
            def checked_once():
                wrong_here = wrong_of(p.calls[name])
                if p.settle is not None:
                    p.settle()
                return wrong_here

            mine, err = w.on_every_rank(checked_once)
            if err:
                p.failed[name] = f"check at {human(lay['size'])}: {err}"
                times[p.key] = []
                continue
            wrong[p.key] = int(w.sum_over_ranks([mine])[0])
        return wrong


def peer_columns(key: str, rounds_s, nbytes: int, factor: float, wrong, failed=None) -> dict:
    """One peer's columns of a row (results_schema.column names): time, bandwidths, spread,
    the rounds, #wrong, and the error that dropped it."""
    def col(field):
        return schema.column(key, field)

    out = {col("us"): None, col("algbw"): None, col("busbw"): None, col("spread"): None,
           col("rounds_us"): []}
    if rounds_s:
        t, spread = summarize(rounds_s)
        algbw = nbytes / t / 1e9
        out.update({col("us"): t * 1e6, col("algbw"): algbw, col("busbw"): algbw * factor,
                    col("spread"): spread, col("rounds_us"): [x * 1e6 for x in rounds_s]})
    out[col("wrong")] = wrong
    if failed:
        out[col("error")] = failed
    return out


def add_measurements(row: dict, name: str, times, t_ceiling, wrong, peers, primary,
                     mpi_row=None) -> dict:
    """Fills a row (its size and busbw_factor already set) with one size's measurement of
    item `name`: each peer's columns, Open MPI's (a peer among `peers` where it runs in the
    bench's own ranks, in turns; else mpi_row: its own launch's row, {} when it has none for
    this size, None when there is no MPI column), the ceiling, the ratios of the `primary`
    peer ("pycomm" in the ratios) to the ceiling, gloo and MPI, and where the torch floor
    was measured, pycomm minus it and that over MPI (harness.peers.torch_floor)."""
    nbytes, factor = row[schema.SIZE], row[schema.BUSBW_FACTOR]
    in_turns = False
    for p in peers:
        if name in p.calls:
            row.update(peer_columns(p.key, times.get(p.key) or [], nbytes, factor,
                                    wrong.get(p.key), p.failed.get(name)))
            in_turns = in_turns or p.key == schema.MPI
    if mpi_row is not None and not in_turns:
        row.update(peer_columns(schema.MPI, [x * 1e-6 for x in mpi_row.get("rounds_us") or []],
                                nbytes, factor, mpi_row.get("wrong"), mpi_row.get("note")))
    if in_turns or mpi_row is not None:
        # Whether MPI's rounds pair with the others' (harness.verdicts).
        row[MPI_IN_TURNS] = in_turns
    ceil = statistics.median(t_ceiling) * 1e6 if t_ceiling else None
    prim = row.get(schema.column(primary.key, "us")) if primary else None
    g, mu = row.get(schema.column(schema.GLOO, "us")), row.get(schema.column(schema.MPI, "us"))
    row.update({schema.CEILING_US: ceil, schema.PYCOMM_PEER: primary.key if primary else None,
                schema.FRAC_OF_CEILING: ceil / prim if ceil and prim else None,
                schema.GLOO_OVER_PYCOMM: g / prim if g and prim else None,
                schema.PYCOMM_OVER_MPI: prim / mu if prim and mu else None})
    if any(p.key == torch_floor.KEY and name in p.calls for p in peers):
        row.update(torch_floor.derived(row, primary.key if primary else None))
    return row


def pycomm_wrong(row: dict) -> int:
    """The shared `wrong` column: pycomm's peers' wrong elements, summed."""
    return sum(row.get(schema.column(k, "wrong")) or 0 for k in schema.PYCOMM_PEERS)


def peer_table_columns(labels_keys, bandwidths) -> list:
    """The table's columns of each (label, key) peer: time, spread, the bandwidth columns
    ((title, field, format) of each), #wrong, then a separator; the torch floor, which
    moves nothing and is not checked, has its time and spread alone."""
    cols = []
    for label, key in labels_keys:
        cols += [Column(f"{label} us", max(10, len(label) + 3), f"{key}_us", ".2f"),
                 Column("+-%", 4, f"{key}_spread", ".0f", 100)]
        if key == torch_floor.KEY:
            cols.append(None)
            continue
        cols += [Column(title, 7, f"{key}_{field}", spec) for title, field, spec in bandwidths]
        cols += [Column("#wrong", 6, f"{key}_wrong", "d"), None]
    return cols


def floor_table_columns(has_mpi: bool) -> list:
    """The columns the torch floor adds beside the ratios: pycomm's own share of a call
    (pycomm - torch) and, with an MPI column, that share over MPI's time."""
    cols = [Column("pyc-torch us", 12, torch_floor.MINUS_US, ".2f")]
    if has_mpi:
        cols.append(Column("(pyc-torch)/mpi", 15, torch_floor.MINUS_OVER_MPI, ".2f"))
    return cols
