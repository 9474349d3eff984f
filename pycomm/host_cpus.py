"""The cores this process may run on (the one count pycomm's defaults, tools and benches
use), and the host's layout of them: NUMA nodes and sockets."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple


def usable_cores() -> int:
    """The process's CPU affinity (what a container's cpuset or taskset leaves it), not the
    machine's core count: ranks that outnumber these cores must not spin."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- the host's layout

def parse_cpulist(text: str) -> List[int]:
    """The CPUs of a kernel cpulist ("0-3,8,10-11"); ValueError for anything else."""
    cpus: List[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if first < 0 or last < first:
            raise ValueError(f"not a CPU range: {part!r}")
        cpus.extend(range(first, last + 1))
    return cpus


@dataclass(frozen=True)
class NumaLayout:
    """The host's NUMA domains, each with its CPUs and socket, and where they came from."""
    nodes: Dict[int, Tuple[int, ...]]  # node -> its CPUs
    sockets: Dict[int, int]            # node -> the socket (physical package) of its first CPU
    source: str                        # "/sys/devices/system/node", "PYCOMM_TOPOLOGY" or "none"

    def nodes_of(self, cpus: Sequence[int]) -> List[int]:
        """The nodes holding any of `cpus`, in order."""
        mine = set(cpus)
        return [n for n, c in sorted(self.nodes.items()) if mine.intersection(c)]

    def describe(self) -> str:
        sockets = len(set(self.sockets.values())) or 1
        parts = [f"node {n} (socket {self.sockets.get(n, 0)}): CPUs {_cpulist(c)}"
                 for n, c in sorted(self.nodes.items())]
        return (f"{len(self.nodes)} node(s) on {sockets} socket(s), from {self.source}: "
                + "; ".join(parts))


def _cpulist(cpus: Sequence[int]) -> str:
    """The shortest cpulist of `cpus`: [0, 1, 2, 5] -> "0-2,5"."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def numa_layout(sys_root: str = "/sys/devices/system") -> NumaLayout:
    """The host's NUMA nodes and sockets, read once from sysfs; PYCOMM_TOPOLOGY overrides
    them, so that a layout this host lacks can be posed: one cpulist per node, ';' between
    them ("0-7;8-15": two nodes, each a socket of its own)."""
    forced = os.environ.get("PYCOMM_TOPOLOGY", "").strip()
    if forced:
        try:
            nodes = {i: tuple(parse_cpulist(part)) for i, part in enumerate(forced.split(";"))}
        except ValueError as e:
            raise ValueError(f"PYCOMM_TOPOLOGY: expected cpulists separated by ';' "
                             f"(\"0-7;8-15\"), got {forced!r}: {e}") from None
        taken = [c for cpus in nodes.values() for c in cpus]
        if any(not cpus for cpus in nodes.values()) or len(taken) != len(set(taken)):
            raise ValueError(f"PYCOMM_TOPOLOGY: every node needs CPUs and no CPU may be in "
                             f"two nodes, got {forced!r}")
        return NumaLayout(nodes, {n: n for n in nodes}, "PYCOMM_TOPOLOGY")
    node_dir = os.path.join(sys_root, "node")
    nodes = {}
    try:
        for name in sorted(os.listdir(node_dir)):
            if name.startswith("node") and name[4:].isdigit():
                with open(os.path.join(node_dir, name, "cpulist")) as f:
                    cpus = tuple(parse_cpulist(f.read()))
                if cpus:  # a node of memory alone (CXL, HBM) runs no rank
                    nodes[int(name[4:])] = cpus
    except (OSError, ValueError):
        nodes = {}
    if not nodes:
        return NumaLayout({0: tuple(range(os.cpu_count() or 1))}, {0: 0}, "none")
    sockets = {}
    for n, cpus in nodes.items():
        path = os.path.join(sys_root, "cpu", f"cpu{cpus[0]}", "topology", "physical_package_id")
        try:
            with open(path) as f:
                sockets[n] = int(f.read())
        except (OSError, ValueError):
            sockets[n] = 0
    return NumaLayout(nodes, sockets, "/sys/devices/system/node")


def pinned_node(layout: Optional[NumaLayout] = None) -> int:
    """The NUMA node holding every CPU this process may run on, or -1 (its affinity spans
    nodes, or the host has none): the node a rank's pinning puts it on. Ranks pinned to
    different nodes are the routing table's NUMA domains."""
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:
        return -1
    nodes = (layout or numa_layout()).nodes_of(sorted(cpus))
    return nodes[0] if len(nodes) == 1 else -1


def placement() -> Dict[str, object]:
    """This process's CPUs and the NUMA nodes they span, on the host's layout."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        cpus = list(range(os.cpu_count() or 1))
    layout = numa_layout()
    return {"cpus": _cpulist(cpus), "nodes": layout.nodes_of(cpus), "layout": layout.describe(),
            "host_nodes": len(layout.nodes)}
