"""The modes bench/ddp_resnet50.py trains in, each a way for DDP to all-reduce its buckets:

    no-comm    DDP with a hook that reduces nothing: N ranks computing side by side with
               no communication. On a host with fewer free cores than ranks it shows how
               much of TN - T1 is the ranks competing for the cores, not the all-reduce.
    sync-only  DDP whose hook all-reduces one element per bucket (on pycomm's worker, as
               the ring's buckets go; the stock backend where pycomm cannot run): every rank
               waits for the slowest at each bucket, as in every mode, but no gradient bytes
               move. What a mode adds over it is what moving the bytes costs.
    stock      DDP's all-reduce on the stock backend (gloo on CPUs, NCCL on GPUs; gloo on
               ranks that share a GPU where NCCL refuses that), through torch's
               allreduce_hook: the Python twin of DDP's built-in path (divide the bucket by
               N, all-reduce SUM), so that its buckets can be timed like the others.
    ring       pycomm.ring_hook, fp32 average.
    ring-bf16  pycomm.ring_hook with RingState(compression="bf16"); ring-fp16 likewise.
    backend    stock DDP, no hook, on a pycomm process group (dist.new_group(backend=
               "pycomm"), what init_process_group("cpu:pycomm") gives every collective):
               DDP's own C++ path. With no hook there is nothing to mark a bucket's
               hand-over and completion, so its in-training comm and exposed columns are
               "-" (pycomm's job trace still times its buckets for the breakdown).

A mode that cannot run here (a ring mode on a CUDA device while pycomm's CUDA transport is
missing; backend while `import pycomm` registers no "pycomm" backend, or not for this
device) is reported as unavailable with the reason."""
from __future__ import annotations

import re

# Each mode, and the compression of the ring modes (pycomm.hooks.RingState's).
MODES = {"stock": None, "ring": None, "ring-bf16": "bf16", "ring-fp16": "fp16", "no-comm": None,
         "sync-only": None, "backend": None}
DEFAULT_MODES = "no-comm,sync-only,stock,ring,ring-bf16,backend"
# The ceilings every mode's step is measured against, round by round.
CEILINGS = ("no-comm", "sync-only")


def uses_pycomm(mode: str) -> bool:
    """Whether the mode's hook runs on pycomm's communicator."""
    return mode.startswith("ring") or mode == "sync-only"


def mode_hook(mode, world):
    """(state, hook, dtype on the wire or None for the gradients' own, and the all-reduce of
    one tensor for the comm-alone measurement, or None)."""
    import torch

    import pycomm

    if mode == "no-comm":
        def no_comm_hook(state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        return None, no_comm_hook, None, None
    if mode == "sync-only":
        # One element per bucket, all-reduced as the ring's buckets are (pycomm's worker,
        # where it runs here; else the stock backend): every rank waits for the slowest at
        # each bucket, as in every mode, and no gradient bytes move.
        if world.sync_with_pycomm:
            def sync(flag):
                return pycomm.all_reduce(flag, async_op=True)
        else:
            def sync(flag):
                return world.dist.all_reduce(flag, async_op=True)

        def sync_only_hook(state, bucket):
            buffer = bucket.buffer()
            flag = torch.zeros(1, device=buffer.device)
            return sync(flag).get_future().then(lambda _: buffer)

        return None, sync_only_hook, None, None
    if mode == "stock":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def issue(t):
            return world.dist.all_reduce(t, async_op=True)

        return None, default_hooks.allreduce_hook, None, issue
    if mode == "backend":
        # No hook: DDP's own all-reduce, on the pycomm group.
        def issue(t):
            return world.dist.all_reduce(t, group=world.pycomm_group, async_op=True)

        return None, None, None, issue
    from pycomm.bucketing import wire_dtype
    from pycomm.hooks import RingState, ring_hook

    compression = MODES[mode]
    op = "avg" if compression is None else "sum"

    def issue(t):
        # As ring_hook calls it: no restore copy (DDP discards a failed step's buckets).
        return pycomm.all_reduce(t, op=op, async_op=True, restore_on_failure=False)

    return RingState(compression=compression), ring_hook, wire_dtype(compression), issue


def ddp_buckets(ddp):
    """(numel, gradient dtype, wire dtype) of DDP's buckets, from its logging data: a mode
    with no hook has no other view of them. After the first steps DDP has rebuilt them in
    the order gradients became ready; its sizes are in bytes."""
    data = ddp._get_ddp_logging_data()
    sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
    dtype = next(p.dtype for p in ddp.module.parameters() if p.requires_grad)
    return [(int(b) // dtype.itemsize, dtype, dtype) for b in re.findall(r"\d+", str(sizes))]
