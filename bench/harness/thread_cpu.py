"""CPU time of this process's threads, grouped by name, from /proc/self/task: how long the
rank's compute thread ("main") and pycomm's threads (named "pycomm-worker", "pycomm-lane",
"pycomm-p2p" by the library) each held a core. On a host whose cores are all computing, a
communication thread's CPU time is taken from the compute threads.

schedstat gives nanoseconds where the kernel keeps it; else stat's utime + stime, in clock
ticks (10 ms). A thread that exits between two snapshots takes its time with it."""
from __future__ import annotations

import os
from collections import Counter

_TASKS = "/proc/self/task"
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def group_of(name: str, tid: int, pid: int) -> str:
    """The row a thread's time goes to: main, a pycomm thread by name, or other."""
    if tid == pid:
        return "main"
    if name.startswith("pycomm-"):
        return name
    return "other"


def _cpu_s(task: str) -> float:
    try:
        with open(os.path.join(task, "schedstat")) as f:
            return int(f.read().split()[0]) * 1e-9
    except (OSError, ValueError, IndexError):
        pass
    with open(os.path.join(task, "stat")) as f:
        # Fields after the parenthesised name; utime and stime are the 14th and 15th.
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def snapshot() -> Counter:
    """{group: CPU seconds so far} over this process's live threads."""
    pid = os.getpid()
    out = Counter()
    try:
        tids = os.listdir(_TASKS)
    except OSError:  # not Linux
        return out
    for tid in tids:
        task = os.path.join(_TASKS, tid)
        try:
            with open(os.path.join(task, "comm")) as f:
                name = f.read().strip()
            out[group_of(name, int(tid), pid)] += _cpu_s(task)
        except OSError:  # the thread exited meanwhile
            continue
    return out


def since(before: Counter) -> Counter:
    """CPU seconds per group since `before` (a snapshot); groups that only appeared since
    count from zero."""
    now = snapshot()
    return Counter({k: max(0.0, now[k] - before.get(k, 0.0)) for k in now})
