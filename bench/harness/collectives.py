"""Each collective described once, in the shape nccl-tests gives them (its *GetCollByteCount,
*InitData, *GetBw and *RunColl): the elements of a rank's input and output for a size, the
bus-bandwidth factor, the exact result of the check pattern, and the torch.distributed call.

Size and count as nccl-tests prints them: size is the bytes of the larger of a rank's input
and output; count is the tensor's elements for all_reduce, broadcast and reduce, one chunk's
(size / N) for the others. busbw = algbw x a factor that makes it comparable with a link's
bandwidth whatever the collective (N ranks; with one rank the factor is 1):
    all_reduce                              2(N-1)/N
    all_gather, reduce_scatter, all_to_all  (N-1)/N
    broadcast, reduce                       1
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .patterns import reduced, values

ROOT = 0  # broadcast's source and reduce's destination


@dataclass(frozen=True)
class Collective:
    name: str
    call: str             # the torch.distributed function behind it, for headers
    reduces: bool         # takes an op
    rooted: bool          # has a root (ROOT)
    in_chunks: int        # a rank's input in chunks of `count` (-1: N of them; 0: in place,
    out_chunks: int       # one tensor of `count` elements is input and output)
    factor_text: str      # the busbw factor as nccl-tests writes it
    sized: str            # what size and count are, for headers
    bus_factor: Callable[[int], float]  # busbw / algbw for N >= 2 ranks
    reference: Callable   # (rank, idx, n, chunk, op, xp) -> exact output values at idx

    @property
    def in_place(self) -> bool:
        """One buffer is both input and output."""
        return self.in_chunks == 0

    def busbw_factor(self, n: int) -> float:
        return 1.0 if n < 2 else self.bus_factor(n)

    def layout(self, size: int, esize: int, n: int) -> dict:
        """Element counts of one rank's input and output for a requested size in bytes,
        rounded down to whole elements (whole chunks), one at least; size: the bytes moved."""
        if self.in_place:
            count = max(size // esize, 1)
            return dict(count=count, in_numel=count, out_numel=count, size=count * esize)
        chunk = max(size // esize // n, 1)
        ins, outs = (chunk * (n if c < 0 else c) for c in (self.in_chunks, self.out_chunks))
        return dict(count=chunk, in_numel=ins, out_numel=outs, size=chunk * n * esize)

    def input_values(self, rank: int, idx, n: int, op: str):
        """What rank `rank` puts in its input at `idx` for the check (broadcast: the root's
        values matter; the others' inputs are overwritten with SENTINEL first)."""
        return values(rank, idx, n, op if self.reduces else "sum")

    def expected(self, rank: int, idx, n: int, chunk: int, op: str, xp):
        """The exact output of rank `rank` at output indices `idx`."""
        return self.reference(rank, idx, n, chunk, op, xp)

    def checked_on(self, rank: int) -> bool:
        """Whether rank's output is defined (reduce: only the root's)."""
        return not (self.name == "reduce" and rank != ROOT)

    def torch_call(self, dist, group, op):
        """fn(inp, out) running this collective through torch.distributed on `group`."""
        from pycomm.torch_compat import all_gather_single, reduce_scatter_single

        return {
            "all_reduce": lambda i, o: dist.all_reduce(o, op=op, group=group),
            "broadcast": lambda i, o: dist.broadcast(o, src=ROOT, group=group),
            "reduce": lambda i, o: dist.reduce(o, dst=ROOT, op=op, group=group),
            "all_gather": lambda i, o: all_gather_single(o, i, group=group),
            "reduce_scatter": lambda i, o: reduce_scatter_single(o, i, op=op, group=group),
            "all_to_all": lambda i, o: dist.all_to_all_single(o, i, group=group),
        }[self.name]


def _ring_factor(n):
    return 2 * (n - 1) / n


def _chunk_factor(n):
    return (n - 1) / n


def _one(n):
    return 1.0


_CHUNKED = "size = {}, count = per-rank chunk"
COLLECTIVES = {c.name: c for c in (
    Collective("all_reduce", "all_reduce", True, False, 0, 0, "2(n-1)/n", "size = the tensor",
               _ring_factor, lambda r, idx, n, chunk, op, xp: reduced(idx, n, op, xp)),
    Collective("broadcast", "broadcast", False, True, 0, 0, "1", "size = the tensor",
               _one, lambda r, idx, n, chunk, op, xp: values(ROOT, idx, n, "sum")),
    Collective("reduce", "reduce", True, True, 0, 0, "1", "size = the tensor",
               _one, lambda r, idx, n, chunk, op, xp: reduced(idx, n, op, xp)),
    Collective("all_gather", "all_gather_into_tensor", False, False, 1, -1, "(n-1)/n",
               _CHUNKED.format("output"), _chunk_factor,
               lambda r, idx, n, chunk, op, xp: values(idx // chunk, idx % chunk, n, "sum")),
    Collective("reduce_scatter", "reduce_scatter_tensor", True, False, -1, 1, "(n-1)/n",
               _CHUNKED.format("input"), _chunk_factor,
               lambda r, idx, n, chunk, op, xp: reduced(idx + r * chunk, n, op, xp)),
    Collective("all_to_all", "all_to_all_single", False, False, -1, -1, "(n-1)/n",
               "size = input = output, count = per-peer chunk", _chunk_factor,
               lambda r, idx, n, chunk, op, xp: values(idx // chunk, r * chunk + idx % chunk,
                                                       n, "sum")),
)}
NAMES = tuple(COLLECTIVES)


def get(name: str) -> Collective:
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise ValueError(f"collective: unknown {name!r}; choose from {', '.join(NAMES)}") from None


def busbw_factor(name: str, n: int) -> float:
    return get(name).busbw_factor(n)


def check(coll: Collective, call, inp, out, rank: int, n: int, op: str, count: int) -> int:
    """This rank's wrong elements after one call(inp, out) on the check pattern (torch
    tensors; count: the layout's; 0 where the rank's output is not defined)."""
    import torch

    from .checks import count_wrong, fill
    from .patterns import SENTINEL

    if coll.in_place:
        if coll.rooted and not coll.reduces and rank != ROOT:
            out.fill_(SENTINEL)  # a broadcast must overwrite it
        else:
            fill(out, lambda idx: coll.input_values(rank, idx, n, op))
    else:
        fill(inp, lambda idx: coll.input_values(rank, idx, n, op))
        out.fill_(SENTINEL)
    call(inp, out)
    if not coll.checked_on(rank):
        return 0
    return count_wrong(out, lambda idx: coll.expected(rank, idx, n, count, op, torch))
