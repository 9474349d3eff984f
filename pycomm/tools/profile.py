"""Where pycomm's calls spend their time, part by part: while the profile is on, every call
into a pycomm backend of this process adds the time of each part of its work to a sum per
part (csrc/core/call_profile.h). The benches print it per collective and size, so that a
regression shows where it went.

    from pycomm.tools import profile
    profile.start()
    for _ in range(1000):
        dist.all_reduce(t)
    parts = profile.take()                # {part: seconds}, summed over the calls
    per_call = parts.per_call()           # {part: seconds per call}
    profile.stop()

The parts nest: `call` (inside the backend: its entry and, for a queued job, the wait for it)
holds `job` (the collective's body), which holds `wait` (on a peer's flags), `copy`,
`reduce`, `cross_memory` (copies straight out of a peer's memory) and `backup`
(restore_on_failure's copy). `frontend` (call - job: checks, routing, staging, the hand-off)
and `other` (job minus its named parts) are derived. What a call through dist.* spends outside
`call` is torch's own. Each timed part reads the clock twice (tens of nanoseconds), so time
small calls with the profile off and take the breakdown from a separate pass.
"""
from __future__ import annotations

from typing import Dict

from .. import _C

# Measured parts, as call_profile.h names them; then the derived ones.
MEASURED = ("call", "job", "wait", "copy", "reduce", "cross_memory", "backup")
DERIVED = ("frontend", "other")


class Parts(dict):
    """{part: seconds summed over the calls}, with `calls`: how many calls entered the backend."""

    calls: int = 0

    def per_call(self) -> Dict[str, float]:
        n = max(1, self.calls)
        return {k: v / n for k, v in self.items()}


def start() -> None:
    """Turns the profile on, at zero."""
    _C.profile_set(True)


def stop() -> None:
    """Turns the profile off and drops its sums."""
    _C.profile_set(False)


def take() -> Parts:
    """The sums since start() or the last take(), in seconds; they start again at zero."""
    raw = _C.profile_take()
    out = Parts({k: raw[k][0] * 1e-9 for k in MEASURED})
    out.calls = raw["call"][1]
    out["frontend"] = max(0.0, out["call"] - out["job"])
    named = sum(out[k] for k in ("wait", "copy", "reduce", "cross_memory", "backup"))
    out["other"] = max(0.0, out["job"] - named)
    return out
