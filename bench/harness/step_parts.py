"""One DDP training step split into its parts, from the marks a training loop takes
(start, forward done, backward done, optimizer done) and each bucket's hand-over: the comm
hook's marks (handed over, future done) where there is a hook, and pycomm's job trace
(pycomm.tools.trace: queued, started, ended, completed) for whatever pycomm ran.

    forward, backward, optimizer   between the loop's marks
    finalize   from the last bucket's hand-over to the end of backward: backward's compute was
               over by then, so this is DDP waiting for the buckets and copying them back
    buckets    buckets handed over in the step
    queue      summed over the step's pycomm jobs: time queued before a thread ran the job
               (behind earlier jobs, or the worker waking up)
    run        summed: time in the job's body (moving and reducing bytes, and waiting there
               for the slower rank)
    complete   summed: from the body's end to its future completed, callbacks included
    in_flight  time at least one bucket was in flight (the union of hand-over..done)

All in seconds; None where the step had nothing to measure it by."""
from __future__ import annotations

PARTS = ("forward", "backward", "finalize", "optimizer", "buckets", "queue", "run", "complete",
         "in_flight")


def union_length(spans) -> float:
    """Total length covered by (start, end) intervals."""
    spans = sorted(spans)
    if not spans:
        return 0.0
    busy, lo, hi = 0.0, spans[0][0], spans[0][1]
    for s, e in spans[1:]:
        if s > hi:
            busy += hi - lo
            lo, hi = s, e
        else:
            hi = max(hi, e)
    return busy + hi - lo


def step_parts(start, forward_end, backward_end, end, handovers=(), jobs=()) -> dict:
    """handovers: (handed over, done or None) per bucket, from a comm hook; jobs: the
    trace's records of this step (they stand in for the hand-overs where there is no hook)."""
    spans = [(h, d) for h, d in handovers if d is not None] or \
        [(j.queued_at, j.completed_at) for j in jobs]
    handed = [h for h, _ in handovers] or [j.queued_at for j in jobs]
    parts = dict(forward=forward_end - start, backward=backward_end - forward_end,
                 optimizer=end - backward_end, buckets=len(handed),
                 finalize=max(0.0, backward_end - max(handed)) if handed else None,
                 in_flight=union_length(spans) if spans else None,
                 queue=None, run=None, complete=None)
    if jobs:
        parts.update(queue=sum(j.started_at - j.queued_at for j in jobs),
                     run=sum(j.ended_at - j.started_at for j in jobs),
                     complete=sum(j.completed_at - j.ended_at for j in jobs))
    return parts
