"""The one place where pycomm's Python side meets torch releases that differ
(pycomm supports 2.11 and newer; csrc/torch/torch_compat.h is the C++ twin).

- torch 2.12 named the tensor forms of all-gather and reduce-scatter
  `all_gather_single` and `reduce_scatter_single`; the old names
  (`all_gather_into_tensor`, `reduce_scatter_tensor`) still work there with a
  FutureWarning, and are the only ones in 2.11. Both pairs reach the same
  backend calls (_allgather_base, _reduce_scatter_base).
"""
from __future__ import annotations

import torch.distributed as dist

all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
