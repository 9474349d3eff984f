"""pycomm.all_reduce against torch.distributed.all_reduce on gloo.

The grid: world size 1-4 x every dtype x every op x element counts 0 .. 16M.
Inputs are small integers stored in each dtype, so every result is exact and
pycomm must equal gloo exactly; results must also be bitwise identical on
every rank. One process group per world size runs all its cases.
"""
import hashlib

import pytest
import torch
import torch.distributed as dist

import pycomm
from support.dtypes_under_test import DTYPES

pytestmark = pytest.mark.ranks

OPS = ["sum", "avg", "max", "min", "product"]
DIST_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
            "product": dist.ReduceOp.PRODUCT}
COUNTS = [0, 1, 2, 7, 1023, (1 << 20) + 3]
BIG = 16 * 1024 * 1024
WORLD_SIZES = [1, 2, 3, 4]


def integer_inputs(rank, count, dtype, op):
    """Small integers: sums of 4 ranks stay exact in every dtype, products too."""
    g = torch.Generator().manual_seed(1_000_003 * rank + 7919 * count + len(op))
    if op == "product":
        x = torch.randint(1, 3, (count,), generator=g)
        if dtype != torch.uint8:
            x *= torch.randint(0, 2, (count,), generator=g) * 2 - 1
    else:
        lo = 0 if dtype == torch.uint8 else -4
        x = torch.randint(lo, 5, (count,), generator=g)
    return x.to(dtype)


def gloo_reference(x, op):
    ref = x.clone()
    if op == "avg":
        dist.all_reduce(ref, dist.ReduceOp.SUM)  # gloo has no AVG: sum, then divide once
        ref.div_(dist.get_world_size())
    else:
        dist.all_reduce(ref, DIST_OPS[op])
    return ref


def digest(t):
    return hashlib.sha1(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def run_grid(dtype_name, op, counts, algorithms):
    """On every rank: each count and algorithm against gloo. Returns (failures, digests)."""
    dtype = DTYPES[dtype_name]
    rank = dist.get_rank()
    failures, digests = [], []
    for count in counts:
        x = integer_inputs(rank, count, dtype, op)
        ref = gloo_reference(x, op)
        for algorithm in algorithms:
            y = x.clone()
            pycomm.all_reduce(y, op=op, algorithm=algorithm)
            if not torch.equal(y, ref):
                bad = (y != ref).nonzero().flatten()[:3].tolist()
                failures.append(f"count={count} algorithm={algorithm}: first differences at {bad}: "
                                f"{y[bad].tolist()} vs gloo {ref[bad].tolist()}")
            digests.append(digest(y))
    return failures, digests


def check_world(world, *args):
    results = world.run(run_grid, *args)
    for rank, (failures, _) in enumerate(results):
        assert not failures, f"rank {rank}: " + "; ".join(failures)
    digests = [d for _, d in results]
    assert all(d == digests[0] for d in digests), "ranks differ bitwise"


def skip_unsupported(dtype_name, op):
    if op == "avg" and not DTYPES[dtype_name].is_floating_point:
        pytest.skip("integer avg is rejected (see test_errors.py)")


GRID = [(w, d, o) for w in WORLD_SIZES for d in DTYPES for o in OPS]


@pytest.mark.parametrize("world_size,dtype_name,op", GRID)
def test_matches_gloo(worlds, world_size, dtype_name, op):
    skip_unsupported(dtype_name, op)
    check_world(worlds(world_size), dtype_name, op, COUNTS, ["direct", "ring", "auto"])


# 16M elements: every dtype with sum, and float32 / bfloat16 with every op.
BIG_GRID = [(w, d, o) for w in WORLD_SIZES for d in DTYPES for o in OPS
            if o == "sum" or d in ("float32", "bfloat16")]


@pytest.mark.parametrize("world_size,dtype_name,op", BIG_GRID)
def test_matches_gloo_16m(worlds, world_size, dtype_name, op):
    skip_unsupported(dtype_name, op)
    check_world(worlds(world_size), dtype_name, op, [BIG], ["auto"])


def random_float_case(dtype_name, count):
    """Non-integer inputs: pycomm vs gloo within a tolerance, ranks bitwise equal."""
    dtype = DTYPES[dtype_name]
    g = torch.Generator().manual_seed(dist.get_rank())
    x = torch.randn(count, generator=g).to(dtype)
    ref = gloo_reference(x, "sum")
    y = x.clone()
    pycomm.all_reduce(y)
    # gloo sums half types pairwise in half; pycomm accumulates in float32 and
    # rounds once, so it is the more accurate of the two. Tolerance: a few ulps
    # of the result dtype per rank.
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    err = ((y.double() - ref.double()).abs() / ref.double().abs().clamp_min(1.0)).max().item()
    exact = x.double()  # the float64 sum over ranks of the exact inputs
    dist.all_reduce(exact)
    err_exact = ((y.double() - exact).abs() / exact.abs().clamp_min(1.0)).max().item()
    return err, err_exact, tol, digest(y)


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("dtype_name", ["float32", "float64", "float16", "bfloat16"])
def test_random_floats_within_tolerance(worlds, world_size, dtype_name):
    results = worlds(world_size).run(random_float_case, dtype_name, 100_003)
    for err, err_exact, tol, _ in results:
        assert err <= tol
        assert err_exact <= tol
    assert len({r[3] for r in results}) == 1


def reduce_op_enum_case():
    x = torch.full((10,), float(dist.get_rank() + 1))
    pycomm.all_reduce(x, op=dist.ReduceOp.MAX)
    y = torch.full((10,), float(dist.get_rank() + 1))
    pycomm.all_reduce(y, op=dist.ReduceOp.AVG)
    return x[0].item(), y[0].item()


def test_accepts_torch_reduce_op(worlds):
    for mx, avg in worlds(3).run(reduce_op_enum_case):
        assert mx == 3.0 and avg == 2.0


def async_case(n_inflight):
    """Several collectives in flight: each completes with its own correct result."""
    rank, world = dist.get_rank(), dist.get_world_size()
    tensors = [torch.full((1000 * (i + 1),), float(rank + i)) for i in range(n_inflight)]
    works = [pycomm.all_reduce(t, async_op=True) for t in tensors]
    sync = torch.full((5,), 1.0)
    pycomm.all_reduce(sync)  # a synchronous call queues behind the async ones
    futures = [w.get_future() for w in works[: n_inflight // 2]]
    # As torch's Work.get_future(): a list holding the tensor itself.
    chained = futures[0].then(lambda f: f.value()[0] * 2)
    for w in works[n_inflight // 2:]:
        assert w.wait() is True
    for f, t in zip(futures, tensors):
        value = f.wait()
        assert isinstance(value, list) and len(value) == 1 and value[0].data_ptr() == t.data_ptr()
    expected = [float(sum(range(world)) + world * i) for i in range(n_inflight)]
    got = [t[0].item() for t in tensors]
    ok_all = all(bool((t == e).all()) for t, e in zip(tensors, expected))
    return got == expected and ok_all, sync[0].item(), chained.wait()[0].item(), \
        all(w.is_completed() for w in works)


@pytest.mark.parametrize("world_size", [2, 4])
def test_async_many_in_flight(worlds, world_size):
    for ok, sync, chained, completed in worlds(world_size).run(async_case, 8):
        assert ok and completed
        assert sync == world_size
        assert chained == 2 * sum(range(world_size))


def barrier_case():
    pycomm.barrier()
    return True


def test_barrier(worlds):
    assert worlds(3).run(barrier_case) == [True] * 3
