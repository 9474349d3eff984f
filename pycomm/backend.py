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

Every door builds its backend in one factory, create_backend (one host or
many), and enters a "pycomm" group's own: pycomm's own API (comm.py) and
ring_hook on such a group take that group's backend; on any other group they
make one without a fallback on one host; pycomm.ProcessGroup makes one from a
store, as dist.ProcessGroupGloo does.
"""
from __future__ import annotations

import datetime
from typing import Optional

import torch
import torch.distributed as dist

from . import _C
from .config import communicator_config, timeout_seconds
from .rendezvous import create_communicator
from .topology import HostLayout, exchange

NAME = "pycomm"

# The host layout each pycomm group's backend found at set-up, by group name:
# the Communicator over such a group is that backend (group_backend), and
# states its layout too.
_GROUP_LAYOUTS: dict = {}


def create_backend(store, rank: int, world: int, timeout_s: float, what: str,
                   fallback_timeout: Optional[datetime.timedelta] = None, tag: str = ""):
    """Collective: pycomm's c10d backend over the `world` ranks that meet
    through `store`, and the HostLayout it found: on one host a communicator
    (with a gloo fallback where fallback_timeout is given, see
    create_host_backend), across hosts the hierarchical plan. The one factory
    of every door: a group's creator, pycomm.ProcessGroup, and a Communicator
    over a group that is not pycomm's.

    Each rank counts its own set-ups in the store, so each set-up (every rank
    making them in the same order) takes keys no earlier one wrote: a store,
    or store prefix, used before gives a fresh group, as gloo's does (torchft
    may configure twice under one prefix)."""
    serial = store.add(f"pycomm/serial/{rank}", 1)
    prefix = f"pycomm/comm/{serial}"
    layout = exchange(store, prefix, rank, world, timeout_s, what)
    tag = f"{tag}{serial}"
    if len(layout.hosts) > 1:
        backend = create_hierarchical_backend(store, prefix, layout, rank, timeout_s, what, tag=tag)
    else:
        backend = create_host_backend(store, prefix, rank, world, timeout_s, what, tag=tag,
                                      fallback_timeout=fallback_timeout)
    return backend, layout


def group_backend(group):
    """(backend, layout) of `group` (None: the default group) where its CPU
    backend is pycomm's, else None: pycomm's own API on that group enters it
    rather than set up a second communicator beside it."""
    try:
        group = group if group is not None else dist.group.WORLD
        backend = group._get_backend(torch.device("cpu"))
        _C.communicator_of(backend)  # TypeError for any other backend
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None
    return backend, _GROUP_LAYOUTS.get(group.group_name)


def _create(options, _backend_options=None):
    """The creator torch calls for each group (extended API)."""
    # PYCOMM_TIMEOUT if set, else the group's own timeout.
    timeout_s = timeout_seconds(None, default=options.timeout.total_seconds())
    backend, layout = create_backend(options.store, options.group_rank, options.group_size, timeout_s,
                                     f"pycomm backend set-up (group {options.group_id})",
                                     fallback_timeout=options.timeout, tag=f"g{options.group_id}s")
    _GROUP_LAYOUTS[options.group_id] = layout
    return backend


def ProcessGroup(store, rank: int, world_size: int, timeout=None):
    """Collective: a pycomm c10d backend over `world_size` ranks that meet
    through `store`, usable without a default group, as
    dist.ProcessGroupGloo(store, rank, world_size, timeout) is (torchft's
    process groups build one per quorum: pycomm/torchft.py).

    timeout: a timedelta or seconds (None: $PYCOMM_TIMEOUT, else pycomm's
    default); its set_timeout changes it for the calls that begin after it.
    A store (prefix) used before gives a fresh group. What pycomm does not
    run goes to a gloo backend over the same store, as on a "pycomm" group.
    Its supports_reconfigure (torch 2.14 on) is False: it does not implement c10d's
    reconfigure(); a new membership is a new ProcessGroup."""
    timeout_s = timeout_seconds(timeout)
    backend, _ = create_backend(store, rank, world_size, timeout_s, "pycomm.ProcessGroup",
                                fallback_timeout=datetime.timedelta(seconds=timeout_s), tag="p")
    return backend


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
