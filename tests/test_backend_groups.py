"""What the backend forwards to gloo (sparse tensors, monitored_barrier) beside its own gather,
scatter and bitwise ops; overlapping subgroups interleaved with the default group; and the
spellings of the backend.
"""
import datetime

import pytest
import torch
import torch.distributed as dist

from pycomm.torch_compat import all_gather_single
from support.process_world import validating_on_gloo
from support.collective_checks import WORLD_SIZES, Checks, check, data_input, garbage_like

pytestmark = pytest.mark.ranks


# ---------------------------------------------------------------------------
# Forwarded to gloo inside the backend: sparse tensors, monitored_barrier; and
# native on one host: gather and scatter (point-to-point: test_backend_p2p.py),
# the bitwise ops, and gather and scatter of bool (once gloo's).

def forwarded_case():
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int64": torch.int64,
              "uint8": torch.uint8}
    for name, dtype in dtypes.items():
        for count in (0, 7, 1023, 100003):  # the last in pieces (256 KiB slots)
            for root in range(world):
                key = ("gather", name, count, root)
                parts = [data_input(key, r, (count,), dtype) for r in range(world)]
                outs = [garbage_like(p) for p in parts] if rank == root else None
                dist.gather(parts[rank].clone(), outs, dst=root)
                if rank == root:
                    c.equal(f"gather root={root} {name} n={count}", torch.cat(outs),
                            torch.cat(parts), bitwise=True)
                key = ("scatter", name, count, root)
                parts = [data_input(key, r, (count,), dtype) for r in range(world)]
                out = garbage_like(parts[rank])
                dist.scatter(out, [p.clone() for p in parts] if rank == root else None, src=root)
                c.equal(f"scatter root={root} {name} n={count}", out, parts[rank], bitwise=True)
    # The bitwise ops, on integer tensors (pycomm's since it took every dtype; gloo's before).
    bitwise = {dist.ReduceOp.BAND: lambda a, b: a & b, dist.ReduceOp.BOR: lambda a, b: a | b,
               dist.ReduceOp.BXOR: lambda a, b: a ^ b}
    for op, fold in bitwise.items():
        key = ("bitwise", str(op))
        parts = [data_input(key, r, (33,), torch.int32) for r in range(world)]
        want = parts[0]
        for p in parts[1:]:
            want = fold(want, p)
        t = parts[rank].clone()
        dist.all_reduce(t, op=op)
        c.equal(f"all_reduce {op}", t, want, bitwise=True)
    # gather and scatter of bool (gloo's until pycomm took every dtype).
    for root in range(world):
        parts = [torch.arange(5) % (r + 2) == 0 for r in range(world)]
        outs = [torch.zeros(5, dtype=torch.bool) for _ in range(world)] if rank == root else None
        dist.gather(parts[rank].clone(), outs, dst=root)
        if rank == root:
            c.equal(f"gather bool root={root}", torch.stack(outs), torch.stack(parts))
        out = torch.zeros(5, dtype=torch.bool)
        dist.scatter(out, [p.clone() for p in parts] if rank == root else None, src=root)
        c.equal(f"scatter bool root={root}", out, parts[rank])
    # Sparse all_reduce is gloo's (the suite's test_sparse_all_reduce_sum): forwarded.
    for dtype in (torch.float32, torch.int64):
        rows = lambda r: (torch.arange(6) % (r + 2) == 0).reshape(6, 1)  # each rank's own rows
        dense = [torch.where(rows(r), data_input(("sparse", str(dtype)), r, (6, 4), dtype), 0)
                 .to(dtype) for r in range(world)]
        t = dense[rank].to_sparse()
        dist.all_reduce(t)
        c.equal(f"sparse all_reduce {dtype}", t.to_dense(), sum(dense[1:], dense[0]), bitwise=True)
    # monitored_barrier is gloo's. Before 2.14, torch's Python lets only a group named
    # "gloo" call it, so it never reaches the backend there.
    try:
        for wait_all in (False, True):
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=60), wait_all_ranks=wait_all)
        c.true("monitored_barrier", True)
    except ValueError as e:
        old = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14)
        c.true("monitored_barrier: refused by torch's own gate", old and "GLOO" in str(e), str(e))
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_forwarded_p2p_gather_scatter(backend_worlds, world_size):
    check(backend_worlds(world_size).run(forwarded_case), f"forwarded w={world_size}")


# ---------------------------------------------------------------------------
# Subgroups: two overlapping backend groups and the default group, interleaved.

def subgroups_case(rounds):
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    backend = "gloo" if validating_on_gloo() else "pycomm"
    ranks_a, ranks_b = list(range(world - 1)), list(range(1, world))
    # new_group is collective over the default group: every rank calls both.
    ga = dist.new_group(ranks_a, backend=backend)
    gb = dist.new_group(ranks_b, backend=backend)
    for i in range(rounds):
        pending = []
        if rank in ranks_a:  # async all_reduce on A, left in flight
            ta = torch.full((5000 + i,), float(rank + i))
            pending.append(("A all_reduce", dist.all_reduce(ta, group=ga, async_op=True), ta,
                            torch.full((5000 + i,), float(sum(ranks_a) + len(ranks_a) * i))))
        if rank in ranks_b:  # sync broadcast from B's last rank (a global rank), all_gather on B
            tb = torch.full((300,), float(rank * 10 + i))
            dist.broadcast(tb, src=ranks_b[-1], group=gb)
            c.equal(f"round {i}: B broadcast", tb, torch.full((300,), float(ranks_b[-1] * 10 + i)))
            outs = [torch.zeros(3) for _ in ranks_b]
            dist.all_gather(outs, torch.full((3,), float(rank)), group=gb)
            c.equal(f"round {i}: B all_gather", torch.stack(outs),
                    torch.tensor([[float(r)] * 3 for r in ranks_b]))
            tr = torch.full((4,), float(rank + 1))
            dist.reduce(tr, dst=ranks_b[0], op=dist.ReduceOp.MAX, group=gb)
            if rank == ranks_b[0]:
                c.equal(f"round {i}: B reduce to {ranks_b[0]}", tr,
                        torch.full((4,), float(ranks_b[-1] + 1)))
        tw = torch.full((1000,), float(rank * i))
        pending.append(("world all_reduce", dist.all_reduce(tw, async_op=True), tw,
                        torch.full((1000,), float(sum(range(world)) * i))))
        if rank in ranks_a:
            out = torch.zeros(2 * len(ranks_a))
            all_gather_single(out, torch.full((2,), float(rank)), group=ga)
            c.equal(f"round {i}: A all_gather_single", out,
                    torch.tensor([float(r) for r in ranks_a for _ in range(2)]))
        for label, work, got, want in pending:
            work.wait()
            c.equal(f"round {i}: {label}", got, want)
        c.digest(f"round {i}", tw)
    for g, members in ((ga, ranks_a), (gb, ranks_b)):
        if rank in members:
            dist.destroy_process_group(g)
    return c.out()


@pytest.mark.parametrize("world_size", [3, 4])
def test_overlapping_subgroups(backend_worlds, world_size):
    check(backend_worlds(world_size).run(subgroups_case, 20), f"subgroups w={world_size}")


# ---------------------------------------------------------------------------
# The spellings of the backend.

def backend_string_case():
    rank, world = dist.get_rank(), dist.get_world_size()
    cpu_backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    t = torch.full((10,), float(rank + 1))
    dist.all_reduce(t)
    group = dist.new_group(backend="pycomm")
    sub_backend = group._get_backend(torch.device("cpu"))
    u = torch.full((3,), float(rank))
    dist.broadcast(u, src=world - 1, group=group)
    dist.destroy_process_group(group)
    return (dist.get_backend(), cpu_backend.name(), sub_backend.name(), t.tolist(), u.tolist())


@pytest.mark.skipif(validating_on_gloo(), reason="pycomm's own backend strings")
@pytest.mark.parametrize("backend", [
    "cpu:pycomm", "pycomm",
    pytest.param("cpu:pycomm,cuda:nccl", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="NCCL needs a GPU"))])
def test_backend_strings(backend_worlds, backend):
    from support.process_world import ProcessWorld

    own = backend != "cpu:pycomm"  # the session's worlds use "cpu:pycomm"
    world = ProcessWorld(2, backend=backend) if own else backend_worlds(2)
    try:
        results = world.run(backend_string_case)
    finally:
        if own:
            world.end()
    for rank, (name, cpu_name, sub_name, t, u) in enumerate(results):
        assert name == backend, f"rank {rank}: get_backend() is {name!r}"
        assert cpu_name == "pycomm" and sub_name == "pycomm", \
            f"rank {rank}: CPU tensors go to {cpu_name!r} (default group), {sub_name!r} (new_group)"
        assert t == [3.0] * 10 and u == [1.0] * 3, f"rank {rank}: {t}, {u}"
