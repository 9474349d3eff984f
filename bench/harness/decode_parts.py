"""Where a tensor-parallel decode step goes, per rank, from two traces of the same
generate() call on every rank: pycomm's job trace (pycomm.tools.trace: each collective's
hand-over, start and end on CLOCK_MONOTONIC, which all processes of a host share) and
torch.profiler's events (what ran, and for how long, in each op).

    compute      the model's own kernels: the self time of every aten op that is not a view
                 or a collective (matmuls, attention, norms, copies)
    collective   the collectives themselves: from the moment the last rank arrived to the
                 end of the body, summed over the step's collectives
    waiting      inside a collective, for the other ranks to arrive (the slower rank's
                 compute, or its framework time, showing up here)
    handoff      pycomm's own per-call overhead outside the body: queued before a thread ran
                 it, and from its end to its future completing
    framework    the rest of the step: DTensor (Redistribute, _FromTorchTensor, the
                 functional collectives' Python), the model's Python, generate()'s loop

All in milliseconds per token; `framework` is the step's wall time less the other parts,
so the profiler's own overhead lands there (the profiled step is slower than an
unprofiled one: the table states both)."""
from __future__ import annotations

# The profiler's names of what is communication, not compute (c10d's ops and the
# functional collectives' wait, whose time is the waiting already counted by the trace).
COLLECTIVE_OPS = ("c10d::", "_c10d_functional::", "pycomm::all_reduce_")


def compute_seconds(events) -> float:
    """Self CPU time of the aten ops that are not collectives, in seconds, from
    torch.profiler's key_averages() (each event's self_cpu_time_total, in µs)."""
    total = 0.0
    for e in events:
        if e.key.startswith("aten::") and not e.key.startswith(COLLECTIVE_OPS):
            total += e.self_cpu_time_total
    return total * 1e-6


def collective_parts(mine, others) -> dict:
    """Seconds summed over this rank's jobs (`mine`, trace records as dicts) against the
    same jobs of the other ranks (`others`: one list per rank, in the same order)."""
    parts = dict(collective=0.0, waiting=0.0, handoff=0.0, jobs=len(mine))
    for k, job in enumerate(mine):
        last = max([job["started_at"]] + [o[k]["started_at"] for o in others if k < len(o)])
        parts["waiting"] += last - job["started_at"]
        parts["collective"] += max(0.0, job["ended_at"] - last)
        parts["handoff"] += (job["started_at"] - job["queued_at"]) + (job["completed_at"] - job["ended_at"])
    return parts


def decode_parts(wall_s: float, tokens: int, compute_s: float, mine, others) -> dict:
    """One rank's step in ms per token (see the module's docstring)."""
    c = collective_parts(mine, others)
    per = 1e3 / tokens
    parts = dict(step=wall_s * per, compute=compute_s * per, collective=c["collective"] * per,
                 waiting=c["waiting"] * per, handoff=c["handoff"] * per,
                 collectives_per_token=c["jobs"] / tokens)
    parts["framework"] = parts["step"] - parts["compute"] - parts["collective"] - parts["waiting"] - \
        parts["handoff"]
    return parts
