"""One size of a point-to-point sweep (harness.p2p's patterns) on the ranks of the default
group: the peers timed in turns, round after round, beside the copy ceiling, then each
peer's exact check. Time and spread as sweep.py takes them for collectives (each call timed
on its own, a rank's median, the slowest rank's per round; the median of the rounds), then
divided by the units of a call (p2p.Pattern.per_call): half a round trip, one message of a
window, one exchange.

The ceiling. A one-way message through a shared staging buffer is two copies of it: in, on
the sender, and out, on the receiver. A streaming transport overlaps them (chunk i is copied
out while chunk i+1 is copied in), so the ceiling is both ranks copying the message at
once, size x busbw_factor bytes each (bibw: their outgoing message in and their incoming one
out), timed as harness.ceilings does on every rank together: on a small host the two copies
contend for memory just as the transfer's do (CopyCeiling copies the bytes as two halves,
there and back). A transport that copies once (Open MPI's CMA for large messages: the
receiver reads the sender's memory) can beat it; below a few KiB the ceiling is the cost of
two torch copy_ calls (about a microsecond each), not of memory."""
from __future__ import annotations

from .ceilings import CopyCeiling
from .p2p import buffers, count_wrong, fill_for_check, layout
from .sweep import Sweep


class P2PSweep(Sweep):
    """The settings of a sweep (see Sweep), and --window and --window-bytes."""

    def __init__(self, world, dtype: str, rounds: int, min_time: float, min_iters: int,
                 max_iters: int, warmup: int, barrier, window: int, window_bytes: int):
        super().__init__(world, dtype, "none", rounds, min_time, min_iters, max_iters, warmup,
                         barrier)
        self.window, self.window_bytes = window, window_bytes

    def layout(self, pattern, size: int) -> dict:
        return layout(pattern, size, self.esize, self.window, self.window_bytes)

    def zeros(self, n):
        return self.world.torch.zeros(n, dtype=self.dtype)

    def measure(self, pattern, size: int, active):
        """Times the active peers on one size in turns, then checks them: (layout, {peer key:
        [seconds per unit, per round]}, [ceiling seconds per round], {peer key: #wrong}). A
        peer that fails on any rank is dropped for the rest of this pattern, with its error."""
        w = self.world
        lay = self.layout(pattern, size)
        bufs = buffers(pattern, self.zeros, lay["count"], w.rank, lay["window"], distinct=False)
        ceiling = CopyCeiling(lay["size"] * pattern.busbw_factor, self.barrier)
        times, t_ceiling = self.timed_rounds(pattern.name, active, lay, lambda call: call(bufs),
                                             ceiling, pattern.per_call(lay["window"]))
        wrong = self.checked(pattern.name, active, times, lay,
                             lambda call: self.check(pattern, call, lay),
                             lambda p: p.exact.get(pattern.name, True))
        return lay, times, t_ceiling, wrong

    def check(self, pattern, call, lay) -> int:
        """This rank's wrong elements after one call on distinct, patterned buffers."""
        torch, rank = self.world.torch, self.world.rank
        b = buffers(pattern, self.zeros, lay["count"], rank, lay["check_window"], distinct=True)
        fill_for_check(torch, b, rank)
        call(b)
        return count_wrong(torch, b, rank)
