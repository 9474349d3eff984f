"""Where pycomm's time goes in one call, part by part (pycomm.tools.profile), printed after a
sweep's tables for the judged sizes, so that the next regression shows where it went.

Each (collective, size, peer) gets a pass of its own after the timed rounds, with the profile
on (it reads the clock around each part, tens of nanoseconds a time, so the timed rounds run
without it). The parts are rank 0's, in µs per call:

    wall      the peer's median time per call, from the sweep (the slowest rank's)
    torch     the torch floor's (the null backend through the same dist.* call), where measured
    frontend  inside the backend, outside the collective's body: argument checks, routing,
              staging, the hand-off to the worker and back
    wait      waits on a peer's flags (handshakes, links)
    copy, reduce, cross_memory, backup
              the copies through shared memory, the reductions, the copies straight out of a
              peer's memory, restore_on_failure's backup copy
    other     the body's rest (bookkeeping between the parts)
"""
from __future__ import annotations

from pycomm.tools import results_schema as schema

from .sizes import human

# The sizes the targets judge (collectives_perf.JUDGED_SIZES): one breakdown each.
SIZES = (64 << 10, 1 << 20, 16 << 20)
PARTS = ("frontend", "wait", "copy", "reduce", "cross_memory", "backup", "other")
# The profiled pass: about this many seconds of calls, at least MIN_CALLS.
PASS_S = 0.05
MIN_CALLS = 5


def available() -> bool:
    """Whether this pycomm has the profile (a build from before it times nothing)."""
    import importlib.util

    return importlib.util.find_spec("pycomm.tools.profile") is not None


def parts_per_call(world, call, per_call_s: float) -> dict:
    """This rank's parts (µs per call) over a profiled pass of call(); every rank makes the
    number of calls rank 0 chose from per_call_s (the peer's time from the sweep)."""
    from pycomm.tools import profile

    n = world.from_rank0(max(MIN_CALLS, int(PASS_S / max(per_call_s, 1e-7))))
    call()
    world.barrier()
    profile.start()
    try:
        for _ in range(n):
            call()
        parts = profile.take()
    finally:
        profile.stop()
    return {k: v / max(n, 1) * 1e6 for k, v in parts.items()}


def row(name: str, size: int, key: str, label: str, parts: dict, measured: dict) -> dict:
    """One line of the table (and of the JSON's meta): the measured row's wall time and
    torch floor beside the parts."""
    return dict(collective=name, size=size, peer=key, label=label,
                wall_us=measured.get(schema.column(key, "us")),
                torch_us=measured.get("torch_floor_us"), **{p: parts.get(p, 0.0) for p in PARTS})


def table(rows) -> str:
    """The printed table, rank 0's."""
    head = (f"{'collective':15s} {'size':>8s} {'peer':9s} | {'wall':>8s} {'torch':>6s} | "
            + " ".join(f"{p[:7]:>8s}" for p in PARTS))
    lines = ["## where the time goes (pycomm.tools.profile, rank 0, us per call; "
             "harness/breakdown.py says what each part holds)", head]
    for r in rows:
        wall = f"{r['wall_us']:8.1f}" if r["wall_us"] is not None else f"{'-':>8s}"
        floor = f"{r['torch_us']:6.1f}" if r["torch_us"] is not None else f"{'-':>6s}"
        lines.append(f"{r['collective']:15s} {human(r['size']):>8s} {r['label']:9s} | {wall} {floor} | "
                     + " ".join(f"{r[p]:8.1f}" for p in PARTS))
    return "\n".join(lines)
