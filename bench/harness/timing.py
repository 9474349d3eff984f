"""How the benchmarks time: one call at a time, medians, and rounds taken in turns.

A shared machine has slow spells; a median of single calls ignores the few that land in
one, and measuring the peers in turns (round-robin, several rounds) lets a spell touch every
peer alike and show in the rounds' spread instead of in one peer's time."""
from __future__ import annotations

import statistics
import time


class Clock:
    """Timestamps on a device's timeline: perf_counter on CPUs; on GPUs CUDA events, read
    only after sync()."""

    def __init__(self, device):
        self.cuda = getattr(device, "type", device) == "cuda"
        if self.cuda:
            import torch

            self._cuda = torch.cuda

    def mark(self):
        if self.cuda:
            event = self._cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def sync(self):
        if self.cuda:
            self._cuda.synchronize()

    def seconds(self, start, end) -> float:
        if self.cuda:
            return start.elapsed_time(end) / 1e3
        return end - start


def sample(fn, iters: int, clock: Clock) -> list:
    """Seconds of each of `iters` calls of fn, each timed on its own."""
    out = []
    for _ in range(iters):
        start = clock.mark()
        fn()
        end = clock.mark()
        clock.sync()
        out.append(clock.seconds(start, end))
    return out


def per_call_median(fn, budget_s: float, min_iters: int, max_iters: int, warmup: int,
                    agree=lambda n: n, slowest=lambda s: s) -> float:
    """Seconds per call: this rank's median over as many calls as fit `budget_s` (by a first
    call's time, within min..max), then the slowest rank's. agree(n) gives every rank the
    same count (rank 0's), so that all make the same calls; slowest(s) is the max over the
    ranks. Both are the identity for one process."""
    for _ in range(warmup):
        fn()
    clock = time.perf_counter
    t0 = clock()
    fn()
    first = clock() - t0
    n = agree(min(max_iters, max(min_iters, int(budget_s / max(first, 1e-7)))))
    samples = []
    for _ in range(n):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return slowest(statistics.median(samples))


def summarize(rounds_s):
    """(median seconds, spread) of the rounds: their median and (max - min) / median."""
    med = statistics.median(rounds_s)
    return med, (max(rounds_s) - min(rounds_s)) / med if med > 0 else 0.0


def in_turns(fns, iters: int, warmup: int = 2) -> list:
    """Each fn's per-call seconds over `iters` rounds, the fns called in turns each round
    (after `warmup` untimed rounds): no fn finds the caches warmed by its own last call."""
    samples = [[] for _ in fns]
    clock = time.perf_counter
    for it in range(warmup + iters):
        for k, fn in enumerate(fns):
            t0 = clock()
            fn()
            if it >= warmup:
                samples[k].append(clock() - t0)
    return samples
