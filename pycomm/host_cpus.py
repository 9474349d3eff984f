"""The cores this process may run on: the one count pycomm's defaults, tools and benches use."""
from __future__ import annotations

import os


def usable_cores() -> int:
    """The process's CPU affinity (what a container's cpuset or taskset leaves it), not the
    machine's core count: ranks that outnumber these cores must not spin."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
