"""Which ranks of a group share a host, learnt through the group's store.

Each rank publishes its host identity (PYCOMM_HOST_ID when set, else hostname
and boot id: rendezvous.host_identity); hosts are ordered by their lowest rank,
and a host's ranks by their rank in the group (their local rank). torchrun's
LOCAL_WORLD_SIZE is a cross-check: a layout that disagrees with it gets a
warning, since the identities decide. A group on one host runs pycomm's
shared-memory collectives as they are; one that spans hosts runs them
hierarchically (csrc/torch/hierarchical.h).
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from . import _C
from .rendezvous import host_identity

# All-reduces up to this many bytes go through each host's leader; larger ones
# (on hosts with equal rank counts) reduce-scatter / all-reduce / all-gather.
DEFAULT_LEADER_MAX_KB = 64


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


def leader_max_bytes_setting() -> int:
    raw = os.environ.get("PYCOMM_HIER_LEADER_MAX_KB")
    try:
        return int(float(raw) * 1024) if raw else DEFAULT_LEADER_MAX_KB * 1024
    except ValueError:
        raise ValueError(f"PYCOMM_HIER_LEADER_MAX_KB: expected a number, got {raw!r}") from None


def exchange(store, prefix: str, rank: int, world: int, timeout_s: float, what: str) -> HostLayout:
    """Collective: every rank publishes its host identity and learns everyone's.
    Bounded by timeout_s; a timeout names the ranks that never published."""
    store.set(f"{prefix}/{rank}", host_identity())
    keys = [f"{prefix}/{r}" for r in range(world)]
    deadline = time.monotonic() + timeout_s
    delay = 1e-4
    while not store.check(keys):
        if time.monotonic() > deadline:
            missing = [r for r, k in enumerate(keys) if not store.check([k])]
            raise _C.CommTimeout(f"{what}: timed out after {timeout_s:g} s waiting for every rank's "
                                 f"host; ranks that never arrived: {', '.join(map(str, missing))}")
        time.sleep(delay)
        delay = min(delay * 2, 0.01)
    layout = HostLayout.from_identities([store.get(k).decode() for k in keys])
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
