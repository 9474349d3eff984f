"""One rank's view of the run: its rank, the world's size, its device and clock, and the
few reductions over the ranks that a benchmark's bookkeeping needs (every rank must make
the same choice of what to measure, or their collectives would not match)."""
from __future__ import annotations

import os

from .timing import Clock


def why(e: BaseException, limit: int = 160) -> str:
    """An exception in one line, for a column's or a mode's reason."""
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:limit]}"


class World:
    """device "cuda": this rank's GPU, LOCAL_RANK modulo the GPUs (more ranks than GPUs
    share them round-robin); else the CPU."""

    def __init__(self, device: str = "cpu"):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.backend = dist.get_backend()
        if device == "cuda":
            local = int(os.environ.get("LOCAL_RANK", self.rank)) % torch.cuda.device_count()
            torch.cuda.set_device(local)
            self.device = torch.device("cuda", local)
        else:
            self.device = torch.device("cpu")
        self.clock = Clock(self.device)
        # The bookkeeping's tensors: on the device only where the default group needs it.
        self._aux = self.device if self.backend == "nccl" else torch.device("cpu")

    def barrier(self):
        if self.backend == "nccl":  # NCCL's barrier needs the device; gloo's has none
            self.dist.barrier(device_ids=[self.device.index])
        else:
            self.dist.barrier()

    def reduce(self, values, op=None) -> list:
        """Element-wise reduction of a list of floats over the ranks (default: sum)."""
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self._aux)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM if op is None else op)
        return t.tolist()

    def max_over_ranks(self, values) -> list:
        return self.reduce(values, self.dist.ReduceOp.MAX)

    def sum_over_ranks(self, values) -> list:
        return self.reduce(values)

    def from_rank0(self, value: int) -> int:
        """Rank 0's integer, on every rank."""
        t = self.torch.tensor([int(value)], device=self._aux)
        self.dist.broadcast(t, 0)
        return int(t.item())

    def on_every_rank(self, fn, limit: int = 160):
        """(fn(), None) when fn ran on every rank, else (None, the first failing rank's
        error). fn must fail (or not) alike on every rank before any communication, as
        argument checks and set-up do; its result is this rank's."""
        value, err = None, None
        try:
            value = fn()
        except Exception as e:  # noqa: BLE001 - any failure is reported, with its text
            err = why(e, limit)
        errs = [None] * self.size
        self.dist.all_gather_object(errs, err)
        first = next((e for e in errs if e), None)
        return (value, None) if first is None else (None, first)
