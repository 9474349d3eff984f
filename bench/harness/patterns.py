"""The data every check runs on: small integers, exact in every dtype (int8 to bfloat16),
so that a reduction has one right answer whatever the order of its sum.

Plain arithmetic on index arrays, so that torch tensors and numpy arrays both work; `xp`
(torch or numpy) is passed where a function of the library is needed."""
from __future__ import annotations

DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64")
OPS = ("sum", "avg", "max", "min", "product", "premul_sum")
# premul_sum multiplies every input by this before the sum: a power of two stays exact.
PREMUL_FACTOR = 2.0
# Outside the values' range 0..4: what a buffer holds where the collective must write.
SENTINEL = 7


def values(rank, idx, n: int, op: str):
    """Rank `rank`'s integer-valued input at element indices `idx` (rank may be an array)."""
    if op == "product":
        return (idx + rank) % 2 + 1  # 1s and 2s: every product is an exact power of two
    v = (idx * 7 + rank * 13) % 5
    if op == "avg" and isinstance(rank, int) and rank == n - 1:
        # Top the last rank up so that the sum is a multiple of n: an exact average.
        total = v
        for q in range(n - 1):
            total = total + (idx * 7 + q * 13) % 5
        v = v + (-total) % n
    return v


def reduced(idx, n: int, op: str, xp):
    """The exact reduction over the n ranks' values at `idx`."""
    out = values(0, idx, n, op)
    for r in range(1, n):
        v = values(r, idx, n, op)
        if op in ("sum", "avg", "premul_sum"):
            out = out + v
        elif op == "product":
            out = out * v
        elif op == "max":
            out = xp.maximum(out, v)
        elif op == "min":
            out = xp.minimum(out, v)
        else:
            raise ValueError(f"op: unknown {op!r}")
    if op == "avg":
        out = out // n
    elif op == "premul_sum":
        out = out * int(PREMUL_FACTOR)
    return out
