"""Which plan and algorithm a collective takes: the backend's own routing table
(csrc/core/routing.h, read through pycomm._C), for `pycomm doctor`,
topology.HostLayout.plan() and the scaling model.

    from pycomm import routing
    routing.all_reduce_route(hosts=2, local_size=4, nbytes=16 << 20)
    # Route(plan='hierarchical', algorithm='rs-ar-ag')
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from ._runtime_missing import import_runtime
from .config import setting

_C = import_runtime("pycomm.routing")

COLLECTIVES = _C.COLLECTIVES  # in the table's order
PLANS = _C.PLANS
ALGORITHMS = _C.ALGORITHMS

# What each algorithm does, for the people reading doctor's plan.
DESCRIPTIONS = {
    "direct": "one shot through the shared-memory slots",
    "ring": "the pipelined shared-memory ring",
    "pairwise": "pairwise shared-memory steps",
    "two_shot": "each rank reduces its chunk from every peer, then gathers: CUDA IPC on one "
                "host, or in place in a CPU tensor in the group's symmetric memory",
    "leader": "reduce to each host's first rank, gloo among those leaders, broadcast back",
    "rs-ar-ag": "shared-memory reduce-scatter, gloo all-reduce of a 1/L shard per local "
                "index, shared-memory all-gather",
    "local-index": "gloo among the ranks of one local index, shared memory inside each host",
    "root-host": "the root's host first, its leader to the other leaders, then each host",
    "channels": "the point-to-point shared-memory channels, one progress loop over every "
                "send and receive posted",
    "gloo": "gloo over the whole group, after pycomm's queued work",
    "two_level": "one host across NUMA domains: reduce in each domain, exchange shards "
                 "between domains, gather in each domain",
    "single_copy": "one host whose ranks read each other's memory: each rank copies what it "
                   "needs straight out of its peers' tensors, once (cross-memory attach)",
}


class Route(NamedTuple):
    plan: str       # one of PLANS
    algorithm: str  # one of ALGORITHMS


def route(collective: str, *, hosts: int = 1, local_size: int = 1, uniform: bool = True,
          count: int = 0, itemsize: int = 4, cuda: bool = False, sparse: bool = False,
          native_op: bool = True, leader_max_bytes: Optional[int] = None,
          direct_max_bytes: Optional[int] = None, dtype: str = "float32", op: str = "sum",
          contiguous: bool = True, domains: int = 1, smallest_domain: Optional[int] = None,
          two_level: Optional[str] = None, two_level_min_bytes: Optional[int] = None,
          single_copy: bool = False, single_copy_min_bytes: Optional[int] = None,
          single_copy_rooted_max_bytes: Optional[int] = None, symmetric: bool = False) -> Route:
    """The route of `collective` with `count` elements of `itemsize` bytes per rank's input
    (all_reduce: the tensor) on `hosts` hosts of `local_size` ranks, pinned to `domains`
    NUMA domains (one host; 1: one, or not pinned) of at least `smallest_domain` ranks each
    (default: the ranks split evenly); two_level and the thresholds default to the settings
    (csrc/core/settings.h, with their PYCOMM_* overrides). `single_copy`: whether the ranks
    read each other's memory (a group's probe decides it at set-up: Communicator.single_copy).
    `symmetric`: an all_reduce's tensor lies in the group's symmetric memory
    (symm_mem.empty(..., device="cpu"), rendezvoused on the group).
    `dtype` (a reducible dtype's name, or "opaque"), `op` and `contiguous` decide only where
    CUDA tensors go."""
    if leader_max_bytes is None:
        leader_max_bytes = setting("hier_leader_max_bytes")
    if direct_max_bytes is None:
        direct_max_bytes = setting("direct_max_bytes", world=local_size)
    if two_level_min_bytes is None:
        two_level_min_bytes = setting("two_level_min_bytes")
    if two_level is None:
        two_level = setting("two_level")
    if smallest_domain is None:
        smallest_domain = local_size // domains
    if single_copy_min_bytes is None:
        single_copy_min_bytes = setting("single_copy_min_bytes")
    if single_copy_rooted_max_bytes is None:
        single_copy_rooted_max_bytes = setting("single_copy_rooted_max_bytes")
    return Route(*_C.route(collective, cuda=cuda, sparse=sparse, native_op=native_op,
                           hosts=hosts, uniform=uniform, local_size=local_size, count=count,
                           bytes=count * itemsize, direct_max_bytes=direct_max_bytes,
                           leader_max_bytes=leader_max_bytes, dtype=dtype, op=op,
                           contiguous=contiguous, domains=domains,
                           smallest_domain=smallest_domain, two_level=two_level,
                           two_level_min_bytes=two_level_min_bytes, single_copy=single_copy,
                           single_copy_min_bytes=single_copy_min_bytes,
                           single_copy_rooted_max_bytes=single_copy_rooted_max_bytes,
                           symmetric=symmetric))


def all_reduce_route(*, hosts: int, local_size: int, nbytes: int, itemsize: int = 4,
                     uniform: bool = True, leader_max_bytes: Optional[int] = None,
                     domains: int = 1) -> Route:
    """The route of an all-reduce of `nbytes` bytes (elements of `itemsize` bytes)."""
    return route("all_reduce", hosts=hosts, local_size=local_size, uniform=uniform,
                 count=nbytes // itemsize, itemsize=itemsize, leader_max_bytes=leader_max_bytes,
                 domains=domains)
