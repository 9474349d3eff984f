"""A DDP comm hook wrapped so that each bucket is marked when DDP hands it over and when its
future completes, on the rank's clock (perf_counter on CPUs; on GPUs CUDA events, which a
future's callback records on a stream that waited for the all-reduce, resolved after the
step synchronizes).

Per step, "comm" is the time at least one bucket was in flight (the union of those
intervals) and "exposed" is the wait after the last bucket was handed over (backward was done
by then, so only waiting was left): max(done) - max(handed over)."""
from __future__ import annotations

from .step_parts import union_length


class HookTimer:
    """Wraps `hook`; register self.hook with DDP in its place."""

    def __init__(self, hook, clock, wire_dtype=None):
        self.clock = clock
        # [bucket index, numel, gradient dtype, dtype on the wire, handed-over mark, done mark]
        self.events = []

        # A function, not a callable object: DDP reads the hook's __name__.
        def timed_hook(state, bucket):
            buffer = bucket.buffer()
            entry = [bucket.index(), buffer.numel(), buffer.dtype, wire_dtype or buffer.dtype,
                     self.clock.mark(), None]
            self.events.append(entry)
            fut = hook(state, bucket)

            def done(f):
                entry[5] = self.clock.mark()
                return f.value()

            return fut.then(done)

        self.hook = timed_hook

    def step_comm(self, start):
        """(comm, exposed) seconds of the step that began at `start`; see the module doc."""
        spans = [(self.clock.seconds(start, e[4]), self.clock.seconds(start, e[5]))
                 for e in self.events if e[5] is not None]
        if not spans:
            return 0.0, 0.0
        exposed = max(0.0, max(e for _, e in spans) - max(s for s, _ in spans))
        return union_length(spans), exposed

    def handovers(self):
        """(handed over, done or None) marks of each bucket of the step (CPU clock only)."""
        return [(e[4], e[5]) for e in self.events]

    def buckets(self):
        """(numel, gradient dtype, wire dtype) of each bucket, in the order of the last step."""
        return [(e[1], e[2], e[3]) for e in self.events]

    def reset(self):
        self.events = []
