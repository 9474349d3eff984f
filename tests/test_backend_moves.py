"""The backend's collectives that move data (broadcast, all_gather, all_to_all, every dtype
by its bytes) and barrier, against references each rank computes itself
(tests/support/collective_checks.py says how).
"""
import time
import warnings

import pytest
import torch
import torch.distributed as dist

from pycomm.torch_compat import all_gather_single
from support.process_world import validating_on_gloo
from support.dtypes_under_test import DTYPES
from support.collective_checks import (COUNTS, WORLD_SIZES, Checks, check, data_input, garbage_like,
                                       generator)

pytestmark = pytest.mark.ranks


# ---------------------------------------------------------------------------
# Data movement.

def broadcast_grid(counts):
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    for root in range(world):
        for name, dtype in DTYPES.items():
            for count in counts:
                key = ("broadcast", root, name, count)
                want = data_input(key, root, (count,), dtype)
                t = want.clone() if rank == root else garbage_like(want)
                dist.broadcast(t, src=root)
                label = f"broadcast root={root} {name} n={count}"
                c.equal_everywhere(label, t, want, bitwise=True)
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_broadcast_every_root(backend_worlds, world_size):
    check(backend_worlds(world_size).run(broadcast_grid, COUNTS), f"broadcast w={world_size}")


def all_gather_grid(counts):
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    for name, dtype in DTYPES.items():
        for count in counts:
            key = ("all_gather", name, count)
            parts = [data_input(key, r, (count,), dtype) for r in range(world)]
            want = torch.cat(parts)
            # list form
            outs = [garbage_like(p) for p in parts]
            dist.all_gather(outs, parts[rank].clone())
            label = f"all_gather (list) {name} n={count}"
            c.equal(label, torch.cat(outs), want, bitwise=True)
            c.digest(label, *outs)
            # one tensor, concatenated form
            out = garbage_like(want)
            all_gather_single(out, parts[rank].clone())
            label = f"all_gather_single (concat) {name} n={count}"
            c.equal_everywhere(label, out, want, bitwise=True)
            # one tensor, stacked form: (world, count); documented, but gloo rejects it
            if not validating_on_gloo():
                out = garbage_like(torch.stack(parts))
                all_gather_single(out, parts[rank].clone())
                label = f"all_gather_single (stack) {name} n={count}"
                c.equal_everywhere(label, out.reshape(-1), want, bitwise=True)
        # the name the contract (and FSDP) uses, once per dtype
        parts = [data_input(("agit", name), r, (5,), dtype) for r in range(world)]
        out = garbage_like(torch.cat(parts))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            dist.all_gather_into_tensor(out, parts[rank].clone())
        c.equal(f"all_gather_into_tensor {name}", out, torch.cat(parts), bitwise=True)
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_all_gather(backend_worlds, world_size):
    check(backend_worlds(world_size).run(all_gather_grid, COUNTS), f"all_gather w={world_size}")


def any_bits(key, rank, shape, dtype):
    """Any bytes, as `dtype` (bool: 0 or 1): for dtypes with no arithmetic too."""
    g = generator(key, rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g) == 1
    n = int(torch.Size(shape).numel())
    raw = torch.randint(0, 256, (n * dtype.itemsize,), generator=g, dtype=torch.uint8)
    return raw.view(dtype).reshape(shape) if n else torch.empty(shape, dtype=dtype)


def carrier(t):
    """t's memory as an integer type of its element size (torch copies those bit for
    bit, where it has no kernel for sub-byte dtypes and writes any bool as 0 or 1)."""
    c = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(t.element_size())
    return t if c is None else t.view(c)


def moves_every_dtype_case(counts):
    """broadcast, all_gather (both forms) and all_to_all_single move every dtype torch
    has (but the quantized ones, which torch refuses before any backend) by its bytes,
    from and into strided views too."""
    from support.dtypes_under_test import ALL_DTYPES, QUANTIZED

    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()

    def same(label, got, want):
        c.equal(label, carrier(got).contiguous(), carrier(want).contiguous(), bitwise=True)

    for name, dtype in ALL_DTYPES.items():
        if name in QUANTIZED:
            continue
        for count in counts:
            for strided in (False, True):
                key = ("moves", name, count, strided)

                def place(t):  # t's values in a tensor of their own, or in a view with steps
                    n = t.numel()
                    view = torch.empty(2 * n, dtype=dtype)[::2] if strided else torch.empty(n, dtype=dtype)
                    if n:
                        carrier(view).copy_(carrier(t))
                    return view

                parts = [any_bits(key, r, (count,), dtype) for r in range(world)]
                label = f"{name} n={count} strided={strided}"
                root = (count + len(name)) % world
                t = place(parts[root] if rank == root else any_bits(key + ("x",), rank, (count,), dtype))
                dist.broadcast(t, src=root)
                same(f"broadcast {label}", t, parts[root])
                out = place(any_bits(key + ("o",), rank, (count * world,), dtype))
                all_gather_single(out, place(parts[rank]))
                same(f"all_gather_single {label}", out, torch.cat(parts))
                outs = [place(any_bits(key + ("o", r), rank, (count,), dtype)) for r in range(world)]
                dist.all_gather(outs, place(parts[rank]))
                for r in range(world):
                    same(f"all_gather {label} from {r}", outs[r], parts[r])
                if count % world == 0:
                    out = place(any_bits(key + ("a",), rank, (count,), dtype))
                    dist.all_to_all_single(out, place(parts[rank]))
                    k = count // world
                    same(f"all_to_all_single {label}", out,
                         torch.cat([p[rank * k:(rank + 1) * k] for p in parts]))
    return c.out()


@pytest.mark.skipif(validating_on_gloo(), reason="gloo refuses most of these dtypes")
@pytest.mark.parametrize("world_size", [2, 3])
def test_every_dtype_moves_by_its_bytes(backend_worlds, world_size):
    check(backend_worlds(world_size).run(moves_every_dtype_case, [0, 6, 1023 * 6]),
          f"moves every dtype w={world_size}")


def split_patterns(world):
    """splits[src][dst]: elements src sends to dst."""
    g = generator("splits", world)
    patterns = {
        "even-0": [[0] * world for _ in range(world)],
        "even-1": [[1] * world for _ in range(world)],
        "even-1023": [[1023] * world for _ in range(world)],
        "uneven": [[int(v) for v in torch.randint(0, 6, (world,), generator=g)]
                   for _ in range(world)],
        "uneven-with-zeros": [[int(v) * int(s) for v, s in
                               zip(torch.randint(1, 40, (world,), generator=g),
                                   torch.randint(0, 2, (world,), generator=g))]
                              for _ in range(world)],
        "one-pair": [[(src == 0 and dst == world - 1) * 9 for dst in range(world)]
                     for src in range(world)],
        "by-rank": [[src * world + dst + 1 for dst in range(world)] for src in range(world)],
        "large-uneven": [[int(v) for v in torch.randint(0, 100_000, (world,), generator=g)]
                         for _ in range(world)],
    }
    return patterns


def all_to_all_grid():
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    for name, dtype in DTYPES.items():
        for pname, splits in split_patterns(world).items():
            for cols in (1, 3):  # 1-D, and 2-D split along the first dimension
                key = ("all_to_all", name, pname, cols)
                inputs = [data_input(key, r, (sum(splits[r]), cols), dtype) for r in range(world)]
                chunks = [list(inputs[r].split(splits[r])) for r in range(world)]
                want = [chunks[src][rank] for src in range(world)]
                in_splits = splits[rank]
                out_splits = [splits[src][rank] for src in range(world)]
                x = inputs[rank] if cols > 1 else inputs[rank].reshape(-1)
                even = len({n for row in splits for n in row}) == 1  # the same on every rank
                # all_to_all_single, explicit splits
                out = garbage_like(torch.cat(want))
                out = out if cols > 1 else out.reshape(-1)
                dist.all_to_all_single(out, x.clone(), out_splits, in_splits)
                label = f"all_to_all_single {pname} {name} cols={cols}"
                c.equal(label, out.reshape(-1), torch.cat(want).reshape(-1), bitwise=True)
                if even:  # no splits given: even split
                    out = garbage_like(out)
                    dist.all_to_all_single(out, x.clone())
                    c.equal(label + " (no splits)", out.reshape(-1), torch.cat(want).reshape(-1),
                            bitwise=True)
                # list form (uneven too; gloo's requires equal sizes)
                if validating_on_gloo() and not even:
                    continue
                outs = [garbage_like(w) for w in want]
                dist.all_to_all(outs, [ch.clone() for ch in chunks[rank]])
                c.equal(f"all_to_all (list) {pname} {name} cols={cols}",
                        torch.cat(outs).reshape(-1), torch.cat(want).reshape(-1), bitwise=True)
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_all_to_all(backend_worlds, world_size):
    check(backend_worlds(world_size).run(all_to_all_grid), f"all_to_all w={world_size}")


def barrier_case():
    """No rank leaves the barrier before the last one enters it (one host: one
    CLOCK_MONOTONIC for all processes)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    times = []
    for i in range(5):
        late = i % world
        if rank == late:
            time.sleep(0.2)
        entered = time.monotonic()
        dist.barrier()
        times.append((late, entered, time.monotonic()))
    work = dist.barrier(async_op=True)
    work.wait()
    return times, work.is_completed()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_barrier(backend_worlds, world_size):
    results = backend_worlds(world_size).run(barrier_case)
    for i in range(5):
        late = results[0][0][i][0]
        entered = results[late][0][i][1]
        for rank, (times, completed) in enumerate(results):
            assert times[i][2] >= entered, f"round {i}: rank {rank} left before rank {late} entered"
            assert completed
