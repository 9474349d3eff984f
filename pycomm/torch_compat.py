"""The one place where pycomm's Python side meets torch releases that differ
(pycomm supports 2.11 and newer; csrc/torch/torch_compat.h is the C++ twin).

- torch 2.12 named the tensor forms of all-gather and reduce-scatter
  `all_gather_single` and `reduce_scatter_single`; the old names
  (`all_gather_into_tensor`, `reduce_scatter_tensor`) still work there with a
  FutureWarning, and are the only ones in 2.11. Both pairs reach the same
  backend calls (_allgather_base, _reduce_scatter_base).
- A group's timeout (`timeout=` of init_process_group or new_group, else
  torch's default for its backend) has no public getter in any of them, and
  torch keeps no table of it (`_world` has none; `_get_default_timeout(backend)`
  is the default, not the group's). Each of the group's backends keeps it in
  its options: `group._get_backend(device).options._timeout`, read by
  `group_timeout` (checked on 2.13 and 2.14 for gloo groups, default and new;
  a release or backend without it gives None, and pycomm's own default holds).
  A pycomm group needs no answer from here: its communicator is its own
  backend, whose timeout is `_C.communicator_of(backend).timeout_s`.
"""
from __future__ import annotations

import datetime
from typing import Optional

import torch
import torch.distributed as dist

all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def group_timeout(group=None) -> Optional[datetime.timedelta]:
    """The timeout torch keeps for `group` (None: the default group), from its
    CPU backend's options, else its CUDA backend's; None where torch does not
    say (a backend without options, or a release that moved them)."""
    if group is None or group is dist.GroupMember.WORLD:
        group = dist.distributed_c10d._get_default_group()
    for device in ("cpu", "cuda"):
        try:
            options = group._get_backend(torch.device(device)).options
            timeout = options._timeout
        except (AttributeError, RuntimeError, ValueError, TypeError):
            continue  # no backend for this device, or options it does not fill in
        if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
            return timeout
    return None
