"""pycomm as a torch.distributed backend.

    import torch.distributed as dist, pycomm
    dist.init_process_group("cpu:pycomm")            # or "pycomm", or "cpu:pycomm,cuda:nccl"
    group = dist.new_group(backend="pycomm")         # each group: its own shared memory

`import pycomm` registers it. Each process group gets a native backend
(csrc/torch/backend.cpp) over a communicator of its own, set up through the
store torch hands the backend (bounded like every pycomm wait, see
rendezvous.py), and a gloo backend on a prefixed copy of that store for what
pycomm does not run itself (send/recv, gather, scatter, bitwise ops).
"""
from __future__ import annotations

import torch.distributed as dist

from . import _C
from .config import communicator_config, timeout_seconds
from .rendezvous import create_communicator

NAME = "pycomm"


def _create(options, _backend_options=None):
    """The creator torch calls for each group (extended API)."""
    rank, world = options.group_rank, options.group_size
    # PYCOMM_TIMEOUT if set, else the group's own timeout.
    timeout_s = timeout_seconds(None, default=options.timeout.total_seconds())
    store = options.store
    comm = create_communicator(store, "pycomm/backend", rank, world, timeout_s,
                               communicator_config(world, timeout_s),
                               what=f"pycomm backend set-up (group {options.group_id})",
                               tag=f"g{options.group_id}")
    try:
        fallback = dist.ProcessGroupGloo(dist.PrefixStore("pycomm/fallback/", store), rank, world,
                                         options.timeout)
    except BaseException:
        comm.close()
        raise
    return _C.make_backend(comm, fallback)


def register():
    if NAME not in dist.Backend.backend_list:
        # With the CUDA sources built, "pycomm" alone (or "cpu:pycomm,cuda:pycomm")
        # serves CUDA tensors too: pycomm's own all-reduce, the rest through gloo.
        devices = ["cpu", "cuda"] if _C.cuda_built() else ["cpu"]
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=devices)
