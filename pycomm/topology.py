"""Which ranks of a group share a host, learnt through the group's store.

Each rank publishes its host identity (PYCOMM_HOST_ID when set, else hostname
and boot id: rendezvous.host_identity) with its pid; hosts are ordered by their lowest rank,
and a host's ranks by their rank in the group (their local rank). torchrun's
LOCAL_WORLD_SIZE is a cross-check: a layout that disagrees with it gets a
warning, since the identities decide. A group on one host runs pycomm's
shared-memory collectives as they are; one that spans hosts runs them
hierarchically (csrc/torch/hierarchical_plan.h).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from . import routing
from .rendezvous import gather_hosts
from .units import human_bytes

# The sizes at which plan() shows the all-reduce's route.
_PLAN_SIZES = (4 << 10, 64 << 10, 1 << 20, 64 << 20)


@dataclass(frozen=True)
class HostLayout:
    hosts: Tuple[Tuple[int, ...], ...]  # group ranks per host, hosts ordered by lowest rank
    names: Tuple[str, ...]              # each host's identity

    @classmethod
    def from_identities(cls, identities: Sequence[str]) -> "HostLayout":
        order: List[str] = []
        ranks: dict = {}
        for r, ident in enumerate(identities):
            if ident not in ranks:
                order.append(ident)
                ranks[ident] = []
            ranks[ident].append(r)
        return cls(tuple(tuple(ranks[i]) for i in order), tuple(order))

    @property
    def world(self) -> int:
        return sum(len(h) for h in self.hosts)

    @property
    def uniform(self) -> bool:
        return len({len(h) for h in self.hosts}) == 1

    def host_of(self, rank: int) -> int:
        return next(i for i, h in enumerate(self.hosts) if rank in h)

    def local_rank(self, rank: int) -> int:
        return self.hosts[self.host_of(rank)].index(rank)

    def route(self, collective: str, nbytes: int = 0, itemsize: int = 4,
              leader_max_bytes: int | None = None) -> routing.Route:
        """The backend's route for `collective` with `nbytes` per rank's input, as rank 0
        of this layout sees it (the routing table, pycomm/routing.py)."""
        return routing.route(collective, hosts=len(self.hosts), local_size=len(self.hosts[0]),
                             uniform=self.uniform, count=nbytes // itemsize, itemsize=itemsize,
                             leader_max_bytes=leader_max_bytes)

    def all_reduce_algorithm(self, nbytes: int, itemsize: int = 4,
                             leader_max_bytes: int | None = None) -> str:
        """What the backend runs for an all-reduce of `nbytes`: on one host
        "shared memory (direct)" or "(ring)"; across hosts leader or rs-ar-ag."""
        r = self.route("all_reduce", nbytes, itemsize, leader_max_bytes)
        return f"shared memory ({r.algorithm})" if r.plan == "host" else r.algorithm

    def describe(self) -> List[str]:
        lines = [f"{len(self.hosts)} host(s), {self.world} rank(s)"
                 + ("" if self.uniform else " (uneven: ranks per host differ)")]
        for name, ranks in zip(self.names, self.hosts):
            lines.append(f"  {name}: ranks {', '.join(map(str, ranks))}")
        return lines

    def plan(self, leader_max_bytes: int | None = None) -> List[str]:
        """What the backend runs on this layout, collective by collective, read from
        the routing table: the all-reduce at a few sizes, then what each route does."""
        sizes = ", ".join(f"{human_bytes(n)} {self.route('all_reduce', n, 4, leader_max_bytes).algorithm}"
                          for n in _PLAN_SIZES)
        lines = [f"all_reduce: {sizes}"]
        used = {self.route("all_reduce", n, 4, leader_max_bytes) for n in _PLAN_SIZES}
        for c in ("all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "barrier"):
            r = self.route(c, 1 << 20, 4, leader_max_bytes)
            used.add(r)
            lines.append(f"{c}: {r.algorithm} ({r.plan})")
        lines += [f"  {r.algorithm}: {routing.DESCRIPTIONS[r.algorithm]}"
                  for r in sorted(used)]
        return lines


def expected_layout(world: int, per_host: int) -> HostLayout:
    """The layout torchrun gives `world` ranks at `per_host` a host (the last may have fewer)."""
    hosts = [tuple(range(s, min(s + per_host, world))) for s in range(0, world, per_host)]
    return HostLayout(tuple(hosts), tuple(f"host {i}" for i in range(len(hosts))))


def exchange(store, prefix: str, rank: int, world: int, timeout_s: float, what: str) -> HostLayout:
    """Collective: every rank publishes its pid and host identity and learns
    everyone's (rendezvous.gather_hosts: bounded by timeout_s, and a one-host
    set-up that follows under the same prefix finds them published already)."""
    layout = HostLayout.from_identities(gather_hosts(store, prefix, rank, world, timeout_s, what))
    _cross_check(layout, rank, world)
    return layout


def _cross_check(layout: HostLayout, rank: int, world: int):
    """torchrun's LOCAL_WORLD_SIZE against the ranks found on this host (for
    the default group, without a PYCOMM_HOST_ID override)."""
    local = os.environ.get("LOCAL_WORLD_SIZE")
    if not local or os.environ.get("PYCOMM_HOST_ID") or os.environ.get("WORLD_SIZE") != str(world):
        return
    found = len(layout.hosts[layout.host_of(rank)])
    if local.isdigit() and int(local) != found:
        warnings.warn(f"pycomm: rank {rank} found {found} rank(s) on its host, but torchrun's "
                      f"LOCAL_WORLD_SIZE is {local}; the host identities decide (set "
                      f"PYCOMM_HOST_ID to override them)", RuntimeWarning, stacklevel=3)
