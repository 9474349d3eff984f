"""Gradient all-reduce for training loops without DDP (Horovod style).

    loss.backward()
    pycomm.allreduce_gradients(model.parameters(), bucket_cap_mb=25)
    optimizer.step()
"""
from __future__ import annotations

from typing import Iterable, List, Optional

import torch

from . import comm as _comm
from .bucket_ops import flatten, unflatten

__all__ = ["allreduce_gradients", "wire_dtype"]

_COMPRESSION = {None: None, "bf16": torch.bfloat16, "fp16": torch.float16}


def wire_dtype(compression: Optional[str]) -> Optional[torch.dtype]:
    """The dtype gradients travel in for `compression` (None: their own)."""
    if compression not in _COMPRESSION:
        raise ValueError(f"compression: expected None, 'bf16' or 'fp16', got {compression!r}")
    return _COMPRESSION[compression]


def _buckets(params: List[torch.Tensor], cap_bytes: int) -> List[List[torch.Tensor]]:
    """Consecutive parameters (already in reverse order) of one dtype, up to
    cap_bytes each; a parameter larger than the cap gets a bucket of its own."""
    buckets, current, size = [], [], 0
    for p in params:
        nbytes = p.numel() * p.element_size()
        if current and (size + nbytes > cap_bytes or p.dtype != current[0].dtype):
            buckets.append(current)
            current, size = [], 0
        current.append(p)
        size += nbytes
    if current:
        buckets.append(current)
    return buckets


def allreduce_gradients(params: Iterable[torch.Tensor], bucket_cap_mb: float = 25,
                        compression: Optional[str] = None, group=None) -> None:
    """Averages the .grad of `params` over the group, in place.

    Gradients are bucketed in reverse parameter order (the order backward
    produces them) up to bucket_cap_mb, packed with pycomm's flatten kernel
    (cast to bf16/fp16 when compression asks), all-reduced bucket by bucket
    while the previous bucket is unpacked, and unpacked with the 1/N average
    fused into the same pass.

    A parameter whose .grad is None on some ranks but not on others takes part
    with zeros on the ranks that lack it (its .grad is created there), so every
    rank reduces the same buckets; one without a gradient anywhere is skipped.
    """
    wire = wire_dtype(compression)
    if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) \
            or not bucket_cap_mb > 0:
        raise ValueError(f"bucket_cap_mb: expected a positive number, got {bucket_cap_mb!r}")
    params = [p for p in params if isinstance(p, torch.Tensor) and p.requires_grad]
    if not params:
        return
    # Checked before anything is sent, so a bad gradient costs no collective.
    for p in params:
        if p.grad is not None and (p.grad.is_sparse or not p.grad.is_contiguous()):
            raise ValueError("params: gradients must be dense and contiguous; got one with "
                             f"layout {p.grad.layout} and strides {tuple(p.grad.stride())}")
    comm = _comm.get_communicator(group)
    world = comm.world_size

    # Agree on which parameters have a gradient: a 0/1 flag each, max-reduced.
    has_grad = torch.tensor([p.grad is not None for p in params], dtype=torch.uint8)
    comm.all_reduce(has_grad, op="max")
    live = []
    for p, flag in zip(params, has_grad.tolist()):
        if not flag:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        live.append(p)
    live.reverse()

    in_flight = []
    for bucket in _buckets(live, int(bucket_cap_mb * 1024 * 1024)):
        grads = [p.grad for p in bucket]
        dtype = wire if (wire is not None and grads[0].is_floating_point()) else grads[0].dtype
        flat = flatten(grads, dtype=dtype)
        # A private bucket: the gradients are written only after success, so
        # there is nothing to restore.
        work = comm.all_reduce(flat, op="sum", async_op=True, restore_on_failure=False)
        in_flight.append((work, flat, grads))
        # Unpack the oldest bucket while the newer ones are being reduced.
        if len(in_flight) > 1:
            _finish(in_flight.pop(0), world)
    for item in in_flight:
        _finish(item, world)


def _finish(item, world: int) -> None:
    work, flat, grads = item
    work.wait()
    unflatten(flat, grads, scale=1.0 / world)
