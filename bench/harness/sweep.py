"""One size of a collective sweep on the ranks of the default group: the peers timed in
turns, round after round, beside the copy ceiling, then each peer's exact check.

Time. Each call is timed on its own; a rank's time is the median of its calls (their number
set by rank 0's first estimate and shared, so that every rank makes the same calls), and the
time of a round is the slowest rank's median. The time reported is the median of the rounds;
the spread, (slowest - fastest round) / median. #wrong: after the timing, each peer runs the
collective once on the check pattern, and the ranks' wrong elements are summed."""
from __future__ import annotations

from pycomm.tools import results_schema as schema

from .ceilings import CopyCeiling, ceiling_bytes
from .collectives import check
from .sizes import human
from .timing import per_call_median, summarize


class Sweep:
    """The settings of a sweep: the dtype and op, --rounds, --min-time (seconds of calls per
    size and peer, over all rounds), --min-iters, --max-iters, --warmup; `barrier` aligns the
    ranks before each ceiling copy."""

    def __init__(self, world, dtype: str, op: str, rounds: int, min_time: float,
                 min_iters: int, max_iters: int, warmup: int, barrier):
        self.world, self.dtype_name, self.op = world, dtype, op
        self.dtype = getattr(world.torch, dtype)
        self.esize = world.torch.empty((), dtype=self.dtype).element_size()
        self.rounds, self.budget_s = rounds, min_time / max(rounds, 1)
        self.min_iters, self.max_iters, self.warmup = min_iters, max_iters, warmup
        self.barrier = barrier

    def seconds_per_call(self, fn) -> float:
        w = self.world
        return per_call_median(fn, self.budget_s, self.min_iters, self.max_iters, self.warmup,
                               agree=w.from_rank0, slowest=lambda s: w.max_over_ranks([s])[0])

    def measure(self, coll, size: int, active):
        """Times the active peers on one size in turns, then checks them: (layout,
        {peer key: [seconds per round]}, [ceiling seconds per round], {peer key: #wrong}).
        A peer that fails on any rank is dropped for the rest of this collective, with its
        error."""
        w, torch = self.world, self.world.torch
        lay = coll.layout(size, self.esize, w.size)
        inp = torch.zeros(lay["in_numel"], dtype=self.dtype)
        out = inp if coll.in_place else torch.zeros(lay["out_numel"], dtype=self.dtype)
        ceiling = CopyCeiling(ceiling_bytes(lay["size"], coll.busbw_factor(w.size)), self.barrier)
        times = {p.key: [] for p in active}
        t_ceiling = []
        for _ in range(self.rounds):
            for p in active:
                if not p.offers(coll.name):
                    continue
                call = p.calls[coll.name]
                t, err = w.on_every_rank(lambda: self.seconds_per_call(lambda: call(inp, out)))
                if err:
                    p.failed[coll.name] = f"{human(lay['size'])}: {err}"
                    times[p.key] = []
                else:
                    times[p.key].append(t)
            t_ceiling.append(ceiling.measure(self.warmup, max(self.min_iters, 20),
                                             lambda s: w.max_over_ranks([s])[0]))
        wrong = {}
        for p in active:
            if not p.offers(coll.name) or not p.exact.get(coll.name, True):
                continue
            mine, err = w.on_every_rank(lambda: check(coll, p.calls[coll.name], inp, out, w.rank,
                                                      w.size, self.op, lay["count"]))
            if err:
                p.failed[coll.name] = f"check at {human(lay['size'])}: {err}"
                times[p.key] = []
                continue
            wrong[p.key] = int(w.sum_over_ranks([mine])[0])
        return lay, times, t_ceiling, wrong


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
