"""Which ranks of a group share a host, learnt through the group's store.

Each rank publishes its host identity (PYCOMM_HOST_ID when set, else hostname
and boot id: rendezvous.host_identity) with its pid; hosts are ordered by their lowest rank,
and a host's ranks by their rank in the group (their local rank). torchrun's
LOCAL_WORLD_SIZE is a cross-check: a layout that disagrees with it gets a
warning, since the identities decide. A group on one host runs pycomm's
shared-memory collectives as they are; one that spans hosts runs them
hierarchically (csrc/torch/hierarchical.h).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from . import _C
from .rendezvous import _Rendezvous


def _default(key: str) -> int:
    """A default of csrc/core/tuning.h (the one place that states them)."""
    return int(_C.default_config(2, len(os.sched_getaffinity(0)))[key])


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

    def all_reduce_algorithm(self, nbytes: int, itemsize: int = 4,
                             leader_max_bytes: int | None = None) -> str:
        """What the backend runs for an all-reduce of `nbytes`: flat ring/direct
        on one host; leader or rs-ar-ag across hosts."""
        if len(self.hosts) == 1:
            return "shared memory (one host)"
        limit = leader_max_bytes if leader_max_bytes is not None else leader_max_bytes_setting()
        return _C.hierarchical_all_reduce_algorithm(self.uniform, len(self.hosts[0]),
                                                    nbytes // itemsize, nbytes, limit)

    def describe(self) -> List[str]:
        lines = [f"{len(self.hosts)} host(s), {self.world} rank(s)"
                 + ("" if self.uniform else " (uneven: ranks per host differ)")]
        for name, ranks in zip(self.names, self.hosts):
            lines.append(f"  {name}: ranks {', '.join(map(str, ranks))}")
        return lines


    def plan(self, leader_max_bytes: int | None = None) -> List[str]:
        """What the backend runs on this layout, collective by collective."""
        if len(self.hosts) == 1:
            return ["every collective: pycomm's shared memory (one host)"]
        limit = leader_max_bytes if leader_max_bytes is not None else leader_max_bytes_setting()
        if self.uniform:
            return [f"all_reduce: leader (reduce to each host's first rank, gloo among leaders, "
                    f"broadcast) up to {limit} B; rs-ar-ag above (shared-memory reduce-scatter, "
                    f"gloo all-reduce of a 1/{len(self.hosts[0])} shard per local index, "
                    f"shared-memory all-gather)",
                    "all_gather, reduce_scatter: hierarchical (gloo per local index)",
                    "broadcast, reduce: hierarchical (through each host's first rank)",
                    "all_to_all: gloo over the whole group"]
        return ["all_reduce: leader at every size (the hosts have different rank counts: "
                "rs-ar-ag needs the same on every host)",
                "all_gather, reduce_scatter: gloo over the whole group (uneven hosts)",
                "broadcast, reduce: hierarchical (through each host's first rank)",
                "all_to_all: gloo over the whole group"]


def expected_layout(world: int, per_host: int) -> HostLayout:
    """The layout torchrun gives `world` ranks at `per_host` a host (the last may have fewer)."""
    hosts = [tuple(range(s, min(s + per_host, world))) for s in range(0, world, per_host)]
    return HostLayout(tuple(hosts), tuple(f"host {i}" for i in range(len(hosts))))


def leader_max_bytes_setting() -> int:
    raw = os.environ.get("PYCOMM_HIER_LEADER_MAX_KB")
    try:
        return int(float(raw) * 1024) if raw else _default("hier_leader_max_bytes")
    except ValueError:
        raise ValueError(f"PYCOMM_HIER_LEADER_MAX_KB: expected a number, got {raw!r}") from None


def piece_bytes_setting() -> int:
    raw = os.environ.get("PYCOMM_HIER_PIECE_KB")
    try:
        return max(1, int(float(raw) * 1024)) if raw else _default("hier_piece_bytes")
    except ValueError:
        raise ValueError(f"PYCOMM_HIER_PIECE_KB: expected a number, got {raw!r}") from None


def exchange(store, prefix: str, rank: int, world: int, timeout_s: float, what: str) -> HostLayout:
    """Collective: every rank publishes its pid and host identity and learns
    everyone's. The keys are the rendezvous's own first step (rendezvous.py),
    under the same prefix, so its bounds hold: the wait ends at timeout_s
    naming the ranks that never arrived, at once if one of them exits, and a
    one-host set-up that follows finds them published already."""
    rdv = _Rendezvous(store, prefix, rank, world, timeout_s, what)
    try:
        rdv.publish_pid()
        keys = [rdv.key(f"pid/{r}") for r in range(world)]
        rdv.wait_until(lambda: store.check(keys), "every rank to start set-up", rdv.unpublished)
        rdv._watch_published_pids()
        layout = HostLayout.from_identities([rdv.hosts[r] for r in range(world)])
    finally:
        rdv.peers.close()
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
