"""What pycomm's communicators did, job by job: while the trace is on, every collective a
communicator of this process runs (DDP's buckets through the backend, the ring hook's
all-reduces, blocking calls run inline) leaves one record of when it was handed over, when
its body started and ended, and when its future completed with its callbacks.

    from pycomm.tools import trace
    trace.start()
    ...                                   # training steps
    for job in trace.take():              # in hand-over order; the trace is emptied
        print(job.what, job.bytes, job.started_at - job.queued_at, job.ended_at - job.started_at)
    trace.stop()

Times are seconds on the clock of time.perf_counter() (CLOCK_MONOTONIC on Linux), so they
line up with marks a training loop takes. The trace keeps at most about a million records
(take() reports what it dropped beyond). Point-to-point operations are not jobs and are not
in it.
"""
from __future__ import annotations

import warnings
from typing import List, NamedTuple

from .. import _C


class Job(NamedTuple):
    what: str            # the collective, as c10d names it: "allreduce" (dist.* and pycomm's API), ...
    bytes: int           # of its output tensors
    queued: bool         # ran on the communicator's worker (False: inline, in the caller's thread)
    queued_at: float     # handed to the communicator
    started_at: float    # its body began
    ended_at: float      # its body returned
    completed_at: float  # its future completed, callbacks included

    @property
    def waited_s(self) -> float:
        """Time in the queue, behind earlier jobs or waiting for the worker to wake."""
        return self.started_at - self.queued_at

    @property
    def ran_s(self) -> float:
        return self.ended_at - self.started_at


def start() -> None:
    """Turns the trace on, empty."""
    _C.trace_set(True)


def stop() -> None:
    """Turns the trace off and drops what it held."""
    _C.trace_set(False)


def take() -> List[Job]:
    """The records since start() or the last take(), in the order the jobs were handed over."""
    records, dropped = _C.trace_take()
    if dropped:
        warnings.warn(f"pycomm.tools.trace: {dropped} records dropped past the cap; "
                      "call take() more often", RuntimeWarning, stacklevel=2)
    # Recorded as they completed (an inline job before a queued one still in flight);
    # returned in the order they were handed over.
    return sorted((Job(what, nbytes, queued, q * 1e-9, s * 1e-9, e * 1e-9, c * 1e-9)
                   for what, nbytes, queued, q, s, e, c in records), key=lambda j: j.queued_at)
