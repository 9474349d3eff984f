"""pycomm as a torch.distributed backend.

    import torch.distributed as dist, pycomm
    dist.init_process_group("cpu:pycomm")            # or "pycomm", or "cpu:pycomm,cuda:nccl"
    group = dist.new_group(backend="pycomm")         # each group: its own shared memory

`import pycomm` registers it. Each process group gets a native backend
(csrc/torch/frontend.h, with the host plan) over a communicator of its own, set up through the
store torch hands the backend (bounded like every pycomm wait, see
rendezvous.py), and a gloo backend on a prefixed copy of that store for what
the routing table (csrc/core/routing.h) sends to the fallback, so that every
call gloo serves is served: sparse tensors, CUDA tensors but the CUDA
all-reduce's, and across hosts gather, scatter and point-to-point, which
pycomm runs in shared memory only.

A group whose ranks span hosts (topology.py) gets the hierarchical plan
(csrc/torch/hierarchical_plan.h): a communicator over each host's ranks, and a gloo
group over the ranks with the same local index on every host for the steps
between hosts.

pycomm's own API (comm.py) enters the same backends: create_host_backend
without a fallback on one host, create_hierarchical_backend across hosts.
"""
from __future__ import annotations

import datetime
from typing import Optional

import torch.distributed as dist

from . import _C
from .torch_compat import group_timeout
from .config import communicator_config, timeout_seconds
from .rendezvous import create_communicator
from .topology import HostLayout, exchange

NAME = "pycomm"

# The timeout torch handed the creator of each of pycomm's groups, by group
# name: the direct API on such a group takes it (group_timeout_s), as it takes
# a gloo group's from its options.
_GROUP_TIMEOUTS: dict = {}


def group_timeout_s(group) -> Optional[float]:
    """Seconds: `group`'s own timeout (None: the default group), or None where
    torch does not say. A group on pycomm's backend answers from what its
    creator was given, any other through torch_compat.group_timeout."""
    name = None
    try:
        name = (group if group is not None else dist.group.WORLD).group_name
    except (AttributeError, RuntimeError, ValueError):
        pass
    if name in _GROUP_TIMEOUTS:
        return _GROUP_TIMEOUTS[name]
    timeout = group_timeout(group)
    return None if timeout is None else timeout.total_seconds()


def _create(options, _backend_options=None):
    """The creator torch calls for each group (extended API)."""
    rank, world = options.group_rank, options.group_size
    _GROUP_TIMEOUTS[options.group_id] = options.timeout.total_seconds()
    # PYCOMM_TIMEOUT if set, else the group's own timeout.
    timeout_s = timeout_seconds(None, default=options.timeout.total_seconds())
    store = options.store
    what = f"pycomm backend set-up (group {options.group_id})"
    layout = exchange(store, "pycomm/backend", rank, world, timeout_s, what)
    if len(layout.hosts) > 1:
        return create_hierarchical_backend(store, "pycomm/backend", layout, rank, timeout_s, what,
                                           tag=f"g{options.group_id}")
    return create_host_backend(store, "pycomm/backend", rank, world, timeout_s, what,
                               tag=f"g{options.group_id}", fallback_timeout=options.timeout)


def create_host_backend(store, prefix: str, rank: int, world: int, timeout_s: float, what: str,
                        tag: str = "", fallback_timeout: Optional[datetime.timedelta] = None):
    """Collective: the backend of a group on one host. fallback_timeout: the
    gloo fallback's (None: no fallback, and what the routing table sends
    there is refused with the argument's error, as pycomm's own API does)."""
    comm = create_communicator(store, prefix, rank, world, timeout_s,
                               communicator_config(world, timeout_s), what=what, tag=tag)
    try:
        fallback = None if fallback_timeout is None else dist.ProcessGroupGloo(
            dist.PrefixStore(f"{prefix}/fallback/", store), rank, world, fallback_timeout)
        return _C.make_backend(comm, fallback)
    except BaseException:
        comm.close()
        raise


def create_hierarchical_backend(store, prefix: str, layout: HostLayout, rank: int,
                                timeout_s: float, what: str, tag: str = ""):
    """Collective: the backend of a group that spans hosts. Every wait in it,
    gloo's included, ends at timeout_s."""
    host, local = layout.host_of(rank), layout.local_rank(rank)
    size = len(layout.hosts[host])
    comm = create_communicator(store, f"{prefix}/host{host}", local, size, timeout_s,
                               communicator_config(size, timeout_s), what=what,
                               tag=f"{tag}h{host}")
    try:
        timeout = datetime.timedelta(seconds=timeout_s)
        # The ranks with this local index, one per host that has one (every
        # host's leader for local index 0), in host order.
        members = [h for h, ranks in enumerate(layout.hosts) if len(ranks) > local]
        inter = dist.ProcessGroupGloo(dist.PrefixStore(f"{prefix}/inter/{local}/", store),
                                      members.index(host), len(members), timeout)
        fallback = dist.ProcessGroupGloo(dist.PrefixStore(f"{prefix}/fallback/", store), rank,
                                         layout.world, timeout)
        # Its thresholds are the communicator's settings (PYCOMM_HIER_*).
        return _C.make_hierarchical_backend(comm, inter, fallback, rank,
                                            [list(h) for h in layout.hosts])
    except BaseException:
        comm.close()
        raise


def register():
    if NAME not in dist.Backend.backend_list:
        # With the CUDA sources built, "pycomm" alone (or "cpu:pycomm,cuda:pycomm")
        # serves CUDA tensors too: pycomm's own all-reduce, the rest through gloo.
        devices = ["cpu", "cuda"] if _C.cuda_built() else ["cpu"]
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=devices)
