"""A wrong call to the backend fails at once with a clear error (TypeError or ValueError
naming the argument), on every rank, and the group stays usable.
"""
import pytest
import torch
import torch.distributed as dist

from pycomm.torch_compat import reduce_scatter_single
from support.process_world import validating_on_gloo
from support.dtypes_under_test import DTYPES
from support.collective_checks import Checks, check

pytestmark = pytest.mark.ranks


# ---------------------------------------------------------------------------
# Bad input.

def expect_raises(c, label, fn, types, words, tensor=None, on_success=None):
    """fn() must raise one of `types` whose message holds every word (any
    case), leave `tensor` unchanged, and never reach the other ranks (every
    rank makes the same call). A call that instead succeeds is checked by
    on_success() when given (a valid choice for some inputs)."""
    before = None if tensor is None else tensor.clone()
    try:
        fn()
    except types as e:
        msg = str(e)
        c.true(label, all(w in msg.lower() for w in words),
               f"{type(e).__name__} raised, but {msg.splitlines()[0]!r} names none of {words}")
        if tensor is not None:
            c.equal(label + ": input unchanged after the error", tensor, before, bitwise=True)
        return
    except Exception as e:  # noqa: BLE001
        c.true(label, False, f"expected {'/'.join(t.__name__ for t in types)}, got "
                             f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return
    if on_success is not None:
        on_success()
    else:
        c.true(label, False, f"expected {'/'.join(t.__name__ for t in types)}, nothing raised")


def bad_input_case():
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    gloo = validating_on_gloo()
    if not gloo:  # gloo's answer to integer AVG is a casting RuntimeError
        for name in ("int8", "uint8", "int32", "int64"):
            dtype = DTYPES[name]
            t = torch.ones(6 * world, dtype=dtype)
            avg = dist.ReduceOp.AVG
            expect_raises(c, f"all_reduce AVG {name}", lambda: dist.all_reduce(t, op=avg),
                          ValueError, ["avg"], t)
            expect_raises(c, f"all_reduce AVG {name} async",
                          lambda: dist.all_reduce(t, op=avg, async_op=True).wait(),
                          ValueError, ["avg"], t)
            expect_raises(c, f"reduce AVG {name}", lambda: dist.reduce(t, dst=0, op=avg),
                          ValueError, ["avg"], t)
            out = torch.zeros(6, dtype=dtype)
            expect_raises(c, f"reduce_scatter_single AVG {name}",
                          lambda: reduce_scatter_single(out, t, op=avg), ValueError, ["avg"], t)
            # PREMUL_SUM on integers: a clear error, or the exact product of the sum
            t = torch.full((5,), rank + 1, dtype=dtype)

            def premul_right():
                c.equal(f"all_reduce PREMUL_SUM(2.0) {name}: the result", t,
                        torch.full((5,), 2 * sum(range(1, world + 1)), dtype=dtype))

            expect_raises(c, f"all_reduce PREMUL_SUM {name}",
                          lambda: dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0)),
                          (ValueError, TypeError), ["premul"], t, premul_right)
        if world > 1:
            # Equal blocks are whole rows (torch's rule, which gloo checks too): world + 1
            # rows of world elements do not split evenly, though their elements would.
            x, y = torch.zeros(world + 1, world), torch.zeros(world + 1, world)
            expect_raises(c, "all_to_all_single rows that do not split evenly",
                          lambda: dist.all_to_all_single(y, x), ValueError, ["dim 0", "evenly"], x)
        if world > 2:
            # Split sizes near 2^63 that wrap: to a sum equal to the tensor's 4 rows (three
            # sizes, 2^64 + 4), or to blocks of rows x 4 elements far past its end. Refused
            # by the rank that passes them, before anything is sent.
            top = (1 << 63) - 1
            wrap = [top, top, 6] + [0] * (world - 3)
            even = [4 // world + (r < 4 % world) for r in range(world)]
            x, y = torch.zeros(4), torch.zeros(4)
            for arg, (outs, ins) in {"input": (even, wrap), "output": (wrap, even)}.items():
                expect_raises(c, f"all_to_all_single {arg}_split_sizes that wrap their sum",
                              lambda: dist.all_to_all_single(y, x, outs, ins), ValueError,
                              [f"{arg}_split_sizes:", "does not fit in 64 bits"], x)
            x2, y2 = torch.zeros(4, 4), torch.zeros(4, 4)
            expect_raises(c, "all_to_all_single input_split_sizes whose blocks wrap",
                          lambda: dist.all_to_all_single(y2, x2, even, wrap), ValueError,
                          ["input_split_sizes:", "9223372036854775807 * 4", "does not fit in 64 bits"], x2)
        # No arithmetic for float8 (gloo has none either): a TypeError naming the
        # tensor and its dtype; an op complex values cannot take: a ValueError.
        t = torch.zeros(5, dtype=torch.float8_e4m3fn)
        expect_raises(c, "all_reduce float8", lambda: dist.all_reduce(t), TypeError,
                      ["tensor:", "float8_e4m3fn", "no arithmetic"], t)
        z = torch.zeros(5, dtype=torch.complex64)
        expect_raises(c, "reduce complex max", lambda: dist.reduce(z, dst=0, op=dist.ReduceOp.MAX),
                      ValueError, ["op:", "'max'", "complex"], z)
        f = torch.ones(5)
        expect_raises(c, "all_reduce float32 BAND", lambda: dist.all_reduce(f, op=dist.ReduceOp.BAND),
                      ValueError, ["op:", "band", "integer and bool"], f)
        # An output whose elements share memory cannot hold a result.
        e = torch.zeros(1).expand(6)
        expect_raises(c, "all_reduce of an expanded view", lambda: dist.all_reduce(e), ValueError,
                      ["tensor:", "share memory"], e)

    # Any layout is served, with the result of the same call on a contiguous
    # copy written back through the view (gloo gets the dense ones right too).
    base = torch.arange(20, dtype=torch.float32).reshape(4, 5) + rank
    t = base.clone().t()
    dist.all_reduce(t)
    want = sum(torch.arange(20, dtype=torch.float32).reshape(4, 5) + r for r in range(world))
    c.equal("all_reduce non-contiguous", t, want.t())
    b = (base.clone() if rank == 0 else torch.zeros(4, 5)).t()
    dist.broadcast(b, src=0)
    c.equal("broadcast non-contiguous", b, torch.arange(20.0).reshape(4, 5).t())
    # Still in step: a valid collective after all that.
    t = torch.full((9,), float(rank))
    dist.all_reduce(t)
    c.equal("all_reduce after the bad calls", t, torch.full((9,), float(sum(range(world)))))
    return c.out()


@pytest.mark.parametrize("world_size", [1, 3])
def test_bad_input(backend_worlds, world_size):
    check(backend_worlds(world_size).run(bad_input_case), f"bad input w={world_size}")
