"""The backend's reductions on every dtype and op (all_reduce, reduce, reduce_scatter), the
dtypes beyond the common ones, 16M elements, half types accumulated in float32 and random
floats against gloo, against references each rank computes itself
(tests/support/collective_checks.py says how).
"""
import warnings

import pytest
import torch
import torch.distributed as dist

from pycomm.torch_compat import all_gather_single, reduce_scatter_single
from support.process_world import reference_group, validating_on_gloo
from support.dtypes_under_test import DTYPES
from support.collective_checks import (BIG, COUNTS, PREMUL_FACTORS, WORLD_SIZES, Checks, check,
                                       garbage_like, generator, ops_for, reduce_op,
                                       reduce_reference, reduction_input)

pytestmark = pytest.mark.ranks


# ---------------------------------------------------------------------------
# Reductions.

def reduction_cases(what, counts, per_rank=1, first_factor=0):
    """The grid of a reduction: every dtype, each of its ops, each count, a premul factor
    taken in turn from `first_factor` on. Yields (name, dtype, op, count, factor, inputs):
    every rank's input of per_rank * count elements, under the key (*what, name, op, count)."""
    world = dist.get_world_size()
    for name, dtype in DTYPES.items():
        for op in ops_for(dtype):
            for i, count in enumerate(counts):
                key = (*what, name, op, count)
                factor = PREMUL_FACTORS[(i + first_factor) % len(PREMUL_FACTORS)]
                inputs = [reduction_input(key, r, per_rank * count, dtype, op, world)
                          for r in range(world)]
                yield name, dtype, op, count, factor, inputs


def all_reduce_grid(counts):
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    for name, dtype, op, count, factor, inputs in reduction_cases(("all_reduce",), counts):
        want = reduce_reference(inputs, op, factor, dtype, world)
        shape = (3, count // 3) if count % 3 == 0 and count else (count,)
        y = inputs[rank].clone().reshape(shape)
        dist.all_reduce(y, op=reduce_op(op, factor))
        label = f"all_reduce {name} {op} n={count}"
        c.equal_everywhere(label, y.reshape(-1), want)
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_all_reduce(backend_worlds, world_size):
    check(backend_worlds(world_size).run(all_reduce_grid, COUNTS + [(1 << 20) + 3]),
          f"all_reduce w={world_size}")


def reduce_grid(counts):
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    for root in range(world):
        for name, dtype, op, count, factor, inputs in reduction_cases(("reduce", root), counts,
                                                                      first_factor=root):
            y = inputs[rank].clone()
            dist.reduce(y, dst=root, op=reduce_op(op, factor))
            if rank == root:
                c.equal(f"reduce root={root} {name} {op} n={count}", y,
                        reduce_reference(inputs, op, factor, dtype, world))
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_reduce_every_root(backend_worlds, world_size):
    check(backend_worlds(world_size).run(reduce_grid, [0, 7, 1023, 65537]), f"reduce w={world_size}")


def reduce_scatter_grid(counts):
    """List form and single-tensor form; `counts` are per-rank output sizes."""
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    for form in ("list", "single"):
        for name, dtype, op, count, factor, inputs in reduction_cases(
                ("reduce_scatter", form), counts, per_rank=world):
            want = reduce_reference(inputs, op, factor, dtype, world)
            want = want[rank * count:(rank + 1) * count]
            out = garbage_like(want)
            x = inputs[rank].clone()
            if form == "list":
                dist.reduce_scatter(out, list(x.split(count)) if count else
                                    [x.new_empty(0) for _ in range(world)],
                                    op=reduce_op(op, factor))
            else:
                reduce_scatter_single(out, x, op=reduce_op(op, factor))
            c.equal(f"reduce_scatter ({form}) {name} {op} n={count}", out, want)
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_reduce_scatter(backend_worlds, world_size):
    check(backend_worlds(world_size).run(reduce_scatter_grid, [0, 1, 7, 1023, 65537]),
          f"reduce_scatter w={world_size}")


def reduce_scatter_tensor_alias_case():
    """The name the contract (and older FSDP) uses: reduce_scatter_tensor."""
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    x = torch.arange(world * 5, dtype=torch.float32) + rank
    out = torch.zeros(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        dist.reduce_scatter_tensor(out, x)
    want = sum(torch.arange(world * 5, dtype=torch.float32) + r for r in range(world))
    c.equal("reduce_scatter_tensor", out, want[rank * 5:(rank + 1) * 5])
    return c.out()


def test_reduce_scatter_tensor_alias(backend_worlds):
    check(backend_worlds(3).run(reduce_scatter_tensor_alias_case), "reduce_scatter_tensor w=3")


# ---------------------------------------------------------------------------
# The dtypes beyond DTYPES that pycomm reduces: bool (sum is or, product and),
# int16 and the unsigned 16/32/64-bit types (which gloo refuses), complex as
# pairs of reals (sum, avg, premul_sum); every op, on both algorithms (the
# largest count takes the ring).

MORE_OPS = {"bool": ["sum", "product", "min", "max", "band", "bor", "bxor"],
            "int": ["sum", "product", "min", "max", "band", "bor", "bxor"],
            "complex": ["sum", "avg", "premul_sum"]}


def more_input(key, rank, count, dtype, op, world):
    g = generator(key, rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, (count,), generator=g) == 1
    if dtype.is_complex:
        x = torch.randint(-20, 21, (count, 2), generator=g).to(torch.float64)
        if op == "avg":
            x *= world
        return torch.view_as_complex(x).to(dtype)
    signed = dtype == torch.int16
    if op == "product":
        x = torch.randint(1, 4, (count,), generator=g)
        return (x * (torch.randint(0, 2, (count,), generator=g) * 2 - 1) if signed else x).to(dtype)
    if op in ("min", "max", "band", "bor", "bxor"):
        return torch.randint(-30000 if signed else 0, 30000, (count,), generator=g).to(dtype)
    return torch.randint(-1000 if signed else 0, 1000, (count,), generator=g).to(dtype)


def more_reference(inputs, op, dtype, world):
    if dtype == torch.bool:
        x = torch.stack(inputs).to(torch.int64)
        any_, all_ = x.amax(0) == 1, x.amin(0) == 1
        return {"sum": any_, "max": any_, "bor": any_, "product": all_, "min": all_,
                "band": all_, "bxor": x.sum(0) % 2 == 1}[op]
    if dtype.is_complex:
        total = sum(x.to(torch.complex128) for x in inputs)
        return {"sum": total, "avg": total / world, "premul_sum": total * 2.0}[op].to(dtype)
    x = torch.stack([t.to(torch.int64) for t in inputs])
    if op in ("sum", "product", "min", "max"):
        out = {"sum": x.sum(0), "product": x.prod(0), "min": x.amin(0), "max": x.amax(0)}[op]
    else:
        out = x[0]
        for y in x[1:]:
            out = {"band": out & y, "bor": out | y, "bxor": out ^ y}[op]
    return out.to(dtype)


def more_dtypes_grid(counts):
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    dtypes = {"bool": torch.bool, "int16": torch.int16, "uint16": torch.uint16,
              "uint32": torch.uint32, "uint64": torch.uint64, "complex64": torch.complex64,
              "complex128": torch.complex128}
    for name, dtype in dtypes.items():
        kind = "bool" if dtype == torch.bool else "complex" if dtype.is_complex else "int"
        for op in MORE_OPS[kind]:
            for count in counts:
                key = ("more", name, op, count)
                inputs = [more_input(key, r, count * world, dtype, op, world) for r in range(world)]
                want = more_reference(inputs, op, dtype, world)
                rop = reduce_op(op, 2.0)
                label = f"{name} {op} n={count}"
                y = inputs[rank].clone()
                dist.all_reduce(y, op=rop)
                c.equal("all_reduce " + label, y, want, bitwise=True)
                c.digest("all_reduce " + label, y)
                y = inputs[rank].clone()
                dist.reduce(y, dst=world - 1, op=rop)
                c.equal("reduce " + label, y, want if rank == world - 1 else inputs[rank],
                        bitwise=True)
                out = torch.zeros(count, dtype=dtype)
                reduce_scatter_single(out, inputs[rank].clone(), op=rop)
                c.equal("reduce_scatter_single " + label, out,
                        want[rank * count:(rank + 1) * count], bitwise=True)
    return c.out()


@pytest.mark.skipif(validating_on_gloo(), reason="gloo refuses most of these dtypes")
@pytest.mark.parametrize("world_size", [2, 3])
def test_more_dtypes_every_op_and_algorithm(backend_worlds, world_size):
    check(backend_worlds(world_size).run(more_dtypes_grid, [0, 1, 7, 1023, 65537]),
          f"more dtypes w={world_size}")


# ---------------------------------------------------------------------------
# 16M elements.

def big_case(count):
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    idx = torch.arange(count, dtype=torch.int32)

    def pattern(r, n, mod, shift):
        return (idx[:n] * 7 + 13 * r) % mod - shift

    for name in ("float32", "bfloat16"):
        dtype = DTYPES[name]
        x = pattern(rank, count, 9, 4).to(dtype)  # [-4, 4]: sums of 4 exact in bf16
        dist.all_reduce(x)
        want = pattern(0, count, 9, 4)
        for r in range(1, world):
            want += pattern(r, count, 9, 4)
        label = f"all_reduce 16M {name}"
        c.equal_everywhere(label, x, want.to(dtype))
        del x, want
        n = count // world
        out = torch.full((n * world,), 77, dtype=dtype)
        all_gather_single(out, pattern(rank, n, 251, 125).to(dtype))
        label = f"all_gather_single 16M {name}"
        for r in range(world):
            c.equal(f"{label}: rank {r}'s part", out[r * n:(r + 1) * n],
                    pattern(r, n, 251, 125).to(dtype))
        c.digest(label, out)
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_16m(backend_worlds, world_size):
    check(backend_worlds(world_size).run(big_case, BIG), f"16M w={world_size}")


# ---------------------------------------------------------------------------
# Half types accumulate in float32.

def half_accumulation_case():
    """Per element, one rank holds H, one 1, one -H, the rest 0 (H = 256 for
    bf16, 2048 for fp16), at random places: H + 1 rounds back to H in the half
    type, so a reduction in that type loses the 1 for some order of the ranks;
    in float32 the sum is exactly 1."""
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    n = 4099
    g = generator("half-acc", world)
    perms = torch.stack([torch.randperm(world, generator=g) for _ in range(n)])  # (n, world)
    for name, big in (("bfloat16", 256.0), ("float16", 2048.0)):
        dtype = DTYPES[name]
        values = torch.zeros(world)
        values[:3] = torch.tensor([big, 1.0, -big])
        x = values[perms[:, rank]].to(dtype)
        want = torch.ones(n, dtype=dtype)
        t = x.clone()
        dist.all_reduce(t)
        c.equal_everywhere(f"all_reduce {name}", t, want)
        for root in range(world):
            t = x.clone()
            dist.reduce(t, dst=root)
            if rank == root:
                c.equal(f"reduce root={root} {name}", t, want)
        m = n // world
        out = torch.zeros(m, dtype=dtype)
        reduce_scatter_single(out, x[:m * world].clone())
        c.equal(f"reduce_scatter_single {name}", out, want[:m])
        t = x.clone()
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(1.0))
        c.equal(f"all_reduce premul_sum(1.0) {name}", t, want)
    return c.out()


@pytest.mark.skipif(validating_on_gloo(), reason="gloo sums half types in half precision")
@pytest.mark.parametrize("world_size", [3, 4])
def test_half_types_accumulate_in_float32(backend_worlds, world_size):
    check(backend_worlds(world_size).run(half_accumulation_case), f"half accumulation w={world_size}")


# ---------------------------------------------------------------------------
# Random floats against gloo.

def random_floats_case(count):
    """Non-integer inputs: close to the exact float64 sum and to gloo's answer;
    bitwise the same on every rank."""
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    gloo = reference_group()
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 4e-3, torch.bfloat16: 3e-2}
    for dtype, rtol in tol.items():
        for op in ("sum", "avg"):
            x = torch.randn(count, generator=generator("rand", rank, str(dtype)),
                            dtype=torch.float64).to(dtype)
            exact = x.to(torch.float64, copy=True)
            dist.all_reduce(exact, group=gloo)
            if op == "avg":
                exact /= world
            ref = x.clone()
            dist.all_reduce(ref, op=dist.ReduceOp.SUM, group=gloo)
            if op == "avg":
                ref = (ref.double() / world).to(dtype)
            y = x.clone()
            dist.all_reduce(y, op=reduce_op(op))
            scale = exact.abs().clamp_min(1.0)
            err = ((y.double() - exact).abs() / scale).max().item()
            err_gloo = ((y.double() - ref.double()).abs() / scale).max().item()
            label = f"random {dtype} {op} n={count}"
            c.true(label + " vs exact", err <= rtol, f"relative error {err:.3g} > {rtol}")
            c.true(label + " vs gloo", err_gloo <= 2 * rtol, f"relative error {err_gloo:.3g}")
            c.digest(label, y)
    return c.out()


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_random_floats_close_to_gloo(backend_worlds, world_size):
    check(backend_worlds(world_size).run(random_floats_case, 100_003),
          f"random floats w={world_size}")
