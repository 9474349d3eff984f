"""Filling buffers with the check pattern and counting the elements that are wrong, block
by block: a 256 MiB message is checked with a few MiB of index arrays, not gigabytes."""
from __future__ import annotations

# Elements per block when filling and checking data: bounds the check's extra memory.
CHECK_BLOCK = 1 << 22


def blocks(n: int):
    """(start, stop) of each block of n elements."""
    for start in range(0, n, CHECK_BLOCK):
        yield start, min(n, start + CHECK_BLOCK)


def fill(t, fn):
    """t[j] = fn(indices j) for a torch tensor, block by block, in t's dtype (through
    float64, which holds every pattern value exactly)."""
    import torch

    for start, stop in blocks(t.numel()):
        idx = torch.arange(start, stop, dtype=torch.int64, device=t.device)
        t[start:stop].copy_(fn(idx).to(torch.float64))


def count_wrong(t, fn) -> int:
    """Elements of a torch tensor that differ from fn(indices) (computed on t's device)."""
    import torch

    wrong = 0
    for start, stop in blocks(t.numel()):
        idx = torch.arange(start, stop, dtype=torch.int64, device=t.device)
        want = fn(idx).to(torch.float64)
        wrong += int((t[start:stop].to(torch.float64) != want).sum().item())
    return wrong


def bitwise_wrong(got, want) -> int:
    """Elements whose bit patterns differ (NaN matches NaN); a wrong shape or dtype counts
    every element."""
    import torch

    if got.dtype != want.dtype or got.shape != want.shape:
        return got.numel() or 1
    ibits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    diff = got.reshape(-1).view(ibits) != want.reshape(-1).view(ibits)
    if got.is_floating_point():
        diff &= ~(torch.isnan(got.reshape(-1)) & torch.isnan(want.reshape(-1)))
    return int(diff.sum())
