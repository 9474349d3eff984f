"""The memory-bandwidth ceiling of a collective, measured in the same run and the same turns
as the peers: every rank at once memcpys twice the collective's bus bytes (size x the busbw
factor: the bytes a rank must move at least; twice, because a transport through a shared
staging buffer copies each byte in and out). On a small machine the ranks' copies contend
for the same memory as their collectives do, which a figure from a data sheet would hide."""
from __future__ import annotations

import statistics
import time


def ceiling_bytes(size: int, factor: float) -> int:
    """Bytes each rank copies for the ceiling of a `size`-byte collective."""
    return int(2 * size * factor)


class CopyCeiling:
    """Two copies of ceiling_bytes / 2 bytes (there and back), timed on every rank at once."""

    def __init__(self, nbytes: int, barrier):
        import torch

        self.src = torch.ones(max(nbytes // 2, 1), dtype=torch.uint8)
        self.dst = torch.empty_like(self.src)
        self.barrier = barrier  # aligns the ranks' copies, so that they contend as in a call

    def _two_copies(self) -> float:
        self.barrier()
        t0 = time.perf_counter()
        self.dst.copy_(self.src)
        self.src.copy_(self.dst)
        return time.perf_counter() - t0

    def measure(self, warmup: int, iters: int, slowest) -> float:
        """The slowest rank's median seconds (slowest: the max over the ranks)."""
        for _ in range(warmup):
            self._two_copies()
        return slowest(statistics.median(self._two_copies() for _ in range(iters)))
