"""The backend's asynchronous work (many in flight, waited on or through futures), coalesced
calls and the object collectives with the sequence number, against references each rank
computes itself (tests/support/collective_checks.py says how).
"""
import warnings

import pytest
import torch
import torch.distributed as dist

from pycomm.torch_compat import all_gather_single, reduce_scatter_single
from support.process_world import validating_on_gloo
from support.collective_checks import (WORLD_SIZES, Checks, check, data_input, garbage_like,
                                       reduce_op, reduce_reference, reduction_input)

pytestmark = pytest.mark.ranks


# ---------------------------------------------------------------------------
# Async work, futures, coalescing.

def future_tensors(value):
    """The tensors a future holds, flattened out of nested lists."""
    if isinstance(value, torch.Tensor):
        return [value]
    assert isinstance(value, (list, tuple)), f"future value is a {type(value).__name__}"
    return [t for v in value for t in future_tensors(v)]


def async_case(rounds):
    """Several collectives of every kind in flight at once; some waited on with
    Work.wait(), others through their future; checked against the references."""
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    for rnd in range(rounds):
        inflight = []  # (label, work, outputs, wanted outputs)

        def ar(n, dtype, op):
            key = ("async-ar", rnd, n, str(dtype), op)
            inputs = [reduction_input(key, r, n, dtype, op, world) for r in range(world)]
            t = inputs[rank].clone()
            w = dist.all_reduce(t, op=reduce_op(op), async_op=True)
            inflight.append((f"all_reduce n={n} {dtype} {op}", w, [t],
                             [reduce_reference(inputs, op, None, dtype, world)]))

        ar(1000, torch.float32, "sum")
        ar(70001, torch.int64, "max")
        root = rnd % world
        want = data_input(("async-bc", rnd), root, (3001,), torch.bfloat16)
        t = want.clone() if rank == root else garbage_like(want)
        inflight.append(("broadcast", dist.broadcast(t, src=root, async_op=True), [t], [want]))
        ar(5, torch.float64, "avg")
        parts = [data_input(("async-ag", rnd), r, (513,), torch.float32) for r in range(world)]
        out = torch.zeros(513 * world)
        inflight.append(("all_gather_single", all_gather_single(out, parts[rank], async_op=True),
                         [out], [torch.cat(parts)]))
        outs = [torch.zeros(513) for _ in range(world)]
        inflight.append(("all_gather", dist.all_gather(outs, parts[rank], async_op=True),
                         outs, parts))
        red_inputs = [reduction_input(("async-rs", rnd), r, 4 * world, torch.int32, "sum", world)
                      for r in range(world)]
        rs_out = torch.zeros(4, dtype=torch.int32)
        inflight.append(("reduce_scatter_single",
                         reduce_scatter_single(rs_out, red_inputs[rank].clone(), async_op=True),
                         [rs_out], [reduce_reference(red_inputs, "sum", None, torch.int32, world)
                                    [rank * 4:(rank + 1) * 4]]))
        t = red_inputs[rank].clone()
        inflight.append((f"reduce root={root}", dist.reduce(t, dst=root, async_op=True), [t],
                         [reduce_reference(red_inputs, "sum", None, torch.int32, world)]
                         if rank == root else None))
        a2a_in = torch.arange(world * 3, dtype=torch.float32) + 100 * rank
        a2a_out = torch.zeros(world * 3)
        inflight.append(("all_to_all_single",
                         dist.all_to_all_single(a2a_out, a2a_in, async_op=True), [a2a_out],
                         [torch.cat([torch.arange(rank * 3, rank * 3 + 3, dtype=torch.float32)
                                     + 100 * src for src in range(world)])]))
        ar(1, torch.float16, "min")
        inflight.append(("barrier", dist.barrier(async_op=True), [], []))

        # Wait in reverse order; every other one through its future.
        for i, (label, work, outputs, wanted) in enumerate(reversed(inflight)):
            label = f"round {rnd}: {label}"
            # gloo's reduce_scatter work has no future and never reports completion
            no_future = validating_on_gloo() and "reduce_scatter" in label
            if i % 2 == 0 and not no_future:
                fut = work.get_future()
                value = fut.wait()
                got = future_tensors(value)
                if label.endswith("barrier"):
                    c.true(label + " future", got == [] or all(g.numel() == 0 for g in got),
                           f"future of a barrier holds {got}")
                elif wanted is not None:
                    c.true(label + " future", len(got) > 0, "future holds no tensor")
                    if got:
                        cat = torch.cat([g.reshape(-1) for g in got])
                        c.equal(label + " future value", cat,
                                torch.cat([o.reshape(-1) for o in outputs]))
            else:
                c.true(label + " wait()", work.wait() is True, "Work.wait() did not return True")
                # (after a future's wait, torch's own backends may mark the
                # work completed a moment later: checked after wait() only)
                if not no_future:
                    c.true(label + " is_completed", work.is_completed(), "not completed after wait()")
            for got, want in zip(outputs, wanted or []):
                c.equal(label, got, want)
        # A chained future.
        t = torch.full((10,), float(rank + 1))
        chained = dist.all_reduce(t, async_op=True).get_future().then(
            lambda f: future_tensors(f.value())[0] * 2)
        c.equal(f"round {rnd}: then()", chained.wait(),
                torch.full((10,), float(world * (world + 1))))
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_async_many_in_flight(backend_worlds, world_size):
    check(backend_worlds(world_size).run(async_case, 3), f"async w={world_size}")


def coalesced_case():
    """The fast-path coalesced forms FSDP and DDP use: all_reduce (-> allreduce_coalesced),
    all_gather_single and reduce_scatter_single inside _coalescing_manager."""
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    sizes = [1, 0, 7, 1023, 65537, 3]
    for async_ops in (True, False):
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for op in ("sum", "max") + (("avg",) if dtype.is_floating_point else ()):
                keys = [("coal-ar", async_ops, str(dtype), op, n) for n in sizes]
                inputs = [[reduction_input(k, r, n, dtype, op, world) for r in range(world)]
                          for k, n in zip(keys, sizes)]
                tensors = [inp[rank].clone() for inp in inputs]
                with dist._coalescing_manager(async_ops=async_ops) as cm:
                    for t in tensors:
                        dist.all_reduce(t, op=reduce_op(op))
                if async_ops:
                    cm.wait()
                for n, t, inp in zip(sizes, tensors, inputs):
                    label = f"coalesced all_reduce async={async_ops} {dtype} {op} n={n}"
                    c.equal_everywhere(label, t, reduce_reference(inp, op, None, dtype, world))
            # all_gather_single, coalesced
            parts = [[data_input(("coal-ag", async_ops, str(dtype), n), r, (n,), dtype)
                      for r in range(world)] for n in sizes]
            outs = [garbage_like(torch.cat(p)) for p in parts]
            with dist._coalescing_manager(async_ops=async_ops) as cm:
                for out, p in zip(outs, parts):
                    all_gather_single(out, p[rank].clone())
            if async_ops:
                cm.wait()
            for n, out, p in zip(sizes, outs, parts):
                label = f"coalesced all_gather_single async={async_ops} {dtype} n={n}"
                c.equal_everywhere(label, out, torch.cat(p), bitwise=True)
            # reduce_scatter_single, coalesced (sum and avg, as FSDP uses them)
            for op in ("sum", "avg") if dtype.is_floating_point else ("sum",):
                keys = [("coal-rs", async_ops, str(dtype), op, n) for n in sizes]
                inputs = [[reduction_input(k, r, n * world, dtype, op, world)
                           for r in range(world)] for k, n in zip(keys, sizes)]
                outs = [torch.full((n,), 77, dtype=dtype) for n in sizes]
                with dist._coalescing_manager(async_ops=async_ops) as cm:
                    for out, inp in zip(outs, inputs):
                        reduce_scatter_single(out, inp[rank].clone(), op=reduce_op(op))
                if async_ops:
                    cm.wait()
                for n, out, inp in zip(sizes, outs, inputs):
                    want = reduce_reference(inp, op, None, dtype, world)[rank * n:(rank + 1) * n]
                    c.equal(f"coalesced reduce_scatter_single async={async_ops} {dtype} {op} n={n}",
                            out, want)
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_coalesced(backend_worlds, world_size):
    check(backend_worlds(world_size).run(coalesced_case), f"coalesced w={world_size}")


def coalesced_lists_case():
    """The list-form coalesced entry points of torch.distributed (deprecated there, but
    called): all_reduce_coalesced, and all_gather_coalesced, whose outputs c10d lays out
    one list per rank, each with one tensor per input (allgather's are by input)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    shapes = [(1,), (0,), (7,), (3, 5), (1023,)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        for async_op in (False, True):
            for dtype in (torch.float32, torch.bfloat16, torch.int64):
                for op in ("sum", "max"):
                    keys = [("arc", async_op, str(dtype), op, s) for s in shapes]
                    inputs = [[reduction_input(k, r, int(torch.Size(s).numel()), dtype, op, world)
                               .reshape(s) for r in range(world)] for k, s in zip(keys, shapes)]
                    tensors = [inp[rank].clone() for inp in inputs]
                    work = dist.all_reduce_coalesced(tensors, op=reduce_op(op), async_op=async_op)
                    if async_op:
                        work.wait()
                    for s, t, inp in zip(shapes, tensors, inputs):
                        label = f"all_reduce_coalesced async={async_op} {dtype} {op} {s}"
                        c.equal_everywhere(label, t, reduce_reference(inp, op, None, dtype, world))
                parts = [[data_input(("agc", async_op, str(dtype), s), r, s, dtype)
                          for s in shapes] for r in range(world)]
                outs = [[garbage_like(t) for t in parts[r]] for r in range(world)]
                work = dist.all_gather_coalesced(outs, [t.clone() for t in parts[rank]],
                                                 async_op=async_op)
                if async_op:
                    work.wait()
                for r in range(world):
                    for s, got, want in zip(shapes, outs[r], parts[r]):
                        label = f"all_gather_coalesced async={async_op} {dtype} from {r} {s}"
                        c.equal_everywhere(label, got, want, bitwise=True)
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_coalesced_lists(backend_worlds, world_size):
    check(backend_worlds(world_size).run(coalesced_lists_case), f"coalesced lists w={world_size}")


def objects_case():
    """The object collectives (pickles over the backend's collectives and
    point-to-point), and c10d's sequence number, which the group's ranks must agree
    on and which TORCH_DISTRIBUTED_DEBUG=DETAIL compares across them (from 2.14)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    # The backend's own number: before 2.14, torch's ProcessGroup answers only for
    # its own backends' types, not for a registered one.
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    obj = lambda r: {"rank": r, "tensor": torch.arange(r + 3), "text": "x" * (r * 1000)}
    same = lambda a, b: (a["rank"] == b["rank"] and a["text"] == b["text"]
                         and torch.equal(a["tensor"], b["tensor"]))
    seq = backend._get_sequence_number_for_group()
    out = [None] * world
    dist.all_gather_object(out, obj(rank))
    c.true("all_gather_object", all(same(out[r], obj(r)) for r in range(world)), str(out)[:200])
    for root in range(world):
        lst = [obj(root), root] if rank == root else [None, None]
        dist.broadcast_object_list(lst, src=root)
        c.true(f"broadcast_object_list src={root}", same(lst[0], obj(root)) and lst[1] == root)
        got = [None] * world if rank == root else None
        dist.gather_object(obj(rank), got, dst=root)
        if rank == root:
            c.true(f"gather_object dst={root}", all(same(got[r], obj(r)) for r in range(world)))
        mine = [None]
        dist.scatter_object_list(mine, [obj(r) for r in range(world)] if rank == root else None,
                                 src=root)
        c.true(f"scatter_object_list src={root}", same(mine[0], obj(rank)))
    if world > 1:
        # A ring of send_object_list/recv_object_list: blocking, so rank 0 sends first.
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        got = [None]
        if rank == 0:
            dist.send_object_list([obj(rank)], dst=nxt)
            dist.recv_object_list(got, src=prv)
        else:
            dist.recv_object_list(got, src=prv)
            dist.send_object_list([obj(rank)], dst=nxt)
        c.true("send/recv_object_list ring", same(got[0], obj(prv)))
    # Every rank counts the same collectives; point-to-point is not one.
    t = torch.ones(4)
    before = backend._get_sequence_number_for_group()
    dist.all_reduce(t)
    dist.barrier()
    after = backend._get_sequence_number_for_group()
    c.true("sequence number: +1 per collective", after == before + 2, f"{before} -> {after}")
    c.true("sequence number: it grew", after > seq, f"{seq} -> {after}")
    c.digest("sequence number", torch.tensor([seq, before, after]))
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_object_collectives_and_sequence_number(backend_worlds, world_size):
    check(backend_worlds(world_size).run(objects_case), f"objects w={world_size}")
