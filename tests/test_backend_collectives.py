"""Every collective of the "pycomm" torch.distributed backend, against
references each rank computes itself.

Every input is rebuilt from a seed, so each rank knows every rank's input and
computes the expected result locally. Inputs are integers chosen so that no op
can overflow or round (sums and products of small values; fp16 and bf16 within
their exact integer range), hence exact equality. Results that must agree
across ranks (all-reduce, broadcast, all-gather) are digested and compared
bitwise across ranks in the test process.

One process world per world size serves the whole module (the session's
backend_worlds fixture) and each test runs its whole grid inside one call per
rank: spawning per case is too slow on 2 cores.

PYCOMM_TEST_BACKEND=gloo runs the same file on gloo to check the references
themselves; only then are the cases gloo cannot do (PREMUL_SUM, fp32
accumulation of half types, typed errors) left out.
"""
import datetime
import hashlib
import time
import warnings
import zlib

import pytest
import torch
import torch.distributed as dist

from pycomm.torch_compat import all_gather_single, reduce_scatter_single
from process_world import reference_group, validating_on_gloo
from dtypes_under_test import DTYPES

pytestmark = pytest.mark.ranks

WORLD_SIZES = [1, 2, 3, 4]
OPS = ["sum", "avg", "min", "max", "product", "premul_sum"]
COUNTS = [0, 1, 7, 1023, 65537]
BIG = 16 * 1024 * 1024
PREMUL_FACTORS = [0.5, 2.0, 3.0]

# Bounds on |input| per op so that every result is an exactly representable
# integer, whatever the order of the reduction (at most 4 ranks).
SUM_BOUND = {torch.float32: 1 << 21, torch.float64: 1 << 50, torch.float16: 1 << 9,
             torch.bfloat16: 1 << 6, torch.int8: 31, torch.uint8: 63, torch.int32: 1 << 29,
             torch.int64: 1 << 60}
AVG_BOUND = {torch.float32: 1 << 19, torch.float64: 1 << 48, torch.float16: 1 << 7,
             torch.bfloat16: 1 << 4}  # times the world size: every sum divides evenly
PREMUL_BOUND = {torch.float32: 1 << 19, torch.float64: 1 << 48, torch.float16: 1 << 7,
                torch.bfloat16: 1 << 4}  # times a factor of at most 3
PRODUCT_BOUND = {torch.float32: 32, torch.float64: 1 << 12, torch.float16: 3, torch.bfloat16: 3,
                 torch.int8: 2, torch.uint8: 2, torch.int32: 1 << 7, torch.int64: 1 << 15}
INT_RANGE = {torch.int8: (-128, 128), torch.uint8: (0, 256), torch.int32: (-2 ** 31, 2 ** 31),
             torch.int64: (-2 ** 63, 2 ** 63 - 1)}


# ---------------------------------------------------------------------------
# In the ranks: inputs, references, checks.

def generator(*key):
    """The same stream on every rank for the same key (not Python's salted hash)."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def ops_for(dtype):
    ops = OPS if dtype.is_floating_point else ["sum", "min", "max", "product"]
    if validating_on_gloo():
        ops = [op for op in ops if op != "premul_sum"]  # gloo has no PREMUL_SUM
    return ops


def reduce_op(op, factor=None):
    if op == "premul_sum":
        return dist._make_nccl_premul_sum(factor)
    return {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "min": dist.ReduceOp.MIN,
            "max": dist.ReduceOp.MAX, "product": dist.ReduceOp.PRODUCT, "band": dist.ReduceOp.BAND,
            "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}[op]


def reduction_input(key, rank, count, dtype, op, world):
    g = generator(key, rank)
    if op in ("min", "max"):  # selection is exact for any value: use the whole range
        if dtype.is_floating_point:
            return (torch.randn(count, generator=g, dtype=torch.float64) * 100).to(dtype)
        lo, hi = INT_RANGE[dtype]
        return torch.randint(lo, hi, (count,), generator=g).to(dtype)
    if op == "product":
        x = torch.randint(1, PRODUCT_BOUND[dtype] + 1, (count,), generator=g)
        if dtype != torch.uint8:
            x *= torch.randint(0, 2, (count,), generator=g) * 2 - 1
        return x.to(dtype)
    bound = {"sum": SUM_BOUND, "avg": AVG_BOUND, "premul_sum": PREMUL_BOUND}[op][dtype]
    lo = 0 if dtype == torch.uint8 else -bound
    x = torch.randint(lo, bound + 1, (count,), generator=g)
    if op == "avg":
        x *= world
    return x.to(dtype)


def reduce_reference(inputs, op, factor, dtype, world):
    """The exact reduction of every rank's input, in float64 or int64, in dtype."""
    if op in ("min", "max"):
        stacked = torch.stack(inputs)
        return stacked.amin(0) if op == "min" else stacked.amax(0)
    wide = torch.stack([x.to(torch.float64 if dtype.is_floating_point else torch.int64)
                        for x in inputs])
    if op == "sum":
        out = wide.sum(0)
    elif op == "avg":
        out = wide.sum(0) / world
    elif op == "product":
        out = wide.prod(0)
    else:
        out = (wide * factor).sum(0)
    return out.to(dtype)


def data_input(key, rank, shape, dtype):
    """Arbitrary bits for collectives that only move data."""
    g = generator(key, rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    lo, hi = INT_RANGE[dtype]
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def garbage_like(t):
    """What an output holds before the collective: never the right answer by chance."""
    return torch.full_like(t, 77)


def as_bits(t):
    if t.numel() == 0:  # (an empty view may keep a step, which .view(uint8) refuses)
        return torch.empty(0, t.element_size(), dtype=torch.uint8)
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8).reshape(t.numel(), t.element_size())


class Checks:
    """Failures and cross-rank digests of one rank, sent back to the test."""

    def __init__(self):
        self.failures, self.digests, self.cases = [], [], 0

    def equal(self, label, got, want, bitwise=False):
        self.cases += 1
        if got.dtype != want.dtype or got.shape != want.shape:
            self.failures.append(f"{label}: got {got.dtype}{tuple(got.shape)}, "
                                 f"want {want.dtype}{tuple(want.shape)}")
            return False
        if bitwise:
            differ = (as_bits(got) != as_bits(want)).any(1)
        else:
            differ = (got != want).reshape(-1)
        if bool(differ.any()):
            idx = differ.nonzero().flatten()[:3]
            g, w = got.reshape(-1), want.reshape(-1)
            self.failures.append(f"{label}: {int(differ.sum())} of {got.numel()} elements differ, "
                                 f"first at {idx.tolist()}: got {g[idx].tolist()}, "
                                 f"want {w[idx].tolist()}")
            return False
        return True

    def true(self, label, ok, detail=""):
        self.cases += 1
        if not ok:
            self.failures.append(f"{label}: {detail}")

    def digest(self, label, *tensors):
        h = hashlib.sha1()
        for t in tensors:
            h.update(as_bits(t).numpy().tobytes())
        self.digests.append((label, h.hexdigest()))

    def out(self):
        return {"failures": self.failures[:25], "n_failures": len(self.failures),
                "digests": self.digests, "cases": self.cases}


# ---------------------------------------------------------------------------
# In the test process.

def check(results, what):
    for rank, res in enumerate(results):
        assert not res["failures"], (f"rank {rank}: {res['n_failures']} failing checks in {what}:\n"
                                     + "\n".join(res["failures"]))
    ref = results[0]["digests"]
    for rank, res in enumerate(results[1:], 1):
        if res["digests"] != ref:
            bad = next(((a, b) for a, b in zip(ref, res["digests"]) if a != b), None)
            where = bad[0][0] if bad else f"{len(ref)} vs {len(res['digests'])} results"
            raise AssertionError(f"{what}: rank {rank} differs bitwise from rank 0 at {where}")
    print(f"[cases] {what}: {results[0]['cases']} checks on each of {len(results)} ranks")


# ---------------------------------------------------------------------------
# Reductions.

def all_reduce_grid(counts):
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    for name, dtype in DTYPES.items():
        for op in ops_for(dtype):
            for i, count in enumerate(counts):
                key = ("all_reduce", name, op, count)
                factor = PREMUL_FACTORS[i % len(PREMUL_FACTORS)]
                inputs = [reduction_input(key, r, count, dtype, op, world) for r in range(world)]
                want = reduce_reference(inputs, op, factor, dtype, world)
                shape = (3, count // 3) if count % 3 == 0 and count else (count,)
                y = inputs[rank].clone().reshape(shape)
                dist.all_reduce(y, op=reduce_op(op, factor))
                label = f"all_reduce {name} {op} n={count}"
                c.equal(label, y.reshape(-1), want)
                c.digest(label, y)
    return c.out()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_all_reduce(backend_worlds, world_size):
    check(backend_worlds(world_size).run(all_reduce_grid, COUNTS + [(1 << 20) + 3]),
          f"all_reduce w={world_size}")


def reduce_grid(counts):
    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    for root in range(world):
        for name, dtype in DTYPES.items():
            for op in ops_for(dtype):
                for i, count in enumerate(counts):
                    key = ("reduce", root, name, op, count)
                    factor = PREMUL_FACTORS[(i + root) % len(PREMUL_FACTORS)]
                    inputs = [reduction_input(key, r, count, dtype, op, world)
                              for r in range(world)]
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
    for name, dtype in DTYPES.items():
        for op in ops_for(dtype):
            for i, count in enumerate(counts):
                for form in ("list", "single"):
                    key = ("reduce_scatter", form, name, op, count)
                    factor = PREMUL_FACTORS[i % len(PREMUL_FACTORS)]
                    inputs = [reduction_input(key, r, world * count, dtype, op, world)
                              for r in range(world)]
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
                c.equal(label, t, want, bitwise=True)
                c.digest(label, t)
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
            c.equal(label, out, want, bitwise=True)
            c.digest(label, out)
            # one tensor, stacked form: (world, count); documented, but gloo rejects it
            if not validating_on_gloo():
                out = garbage_like(torch.stack(parts))
                all_gather_single(out, parts[rank].clone())
                label = f"all_gather_single (stack) {name} n={count}"
                c.equal(label, out.reshape(-1), want, bitwise=True)
                c.digest(label, out)
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
    from dtypes_under_test import ALL_DTYPES, QUANTIZED

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
                    c.equal(label, t, reduce_reference(inp, op, None, dtype, world))
                    c.digest(label, t)
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
                c.equal(label, out, torch.cat(p), bitwise=True)
                c.digest(label, out)
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
                        c.equal(label, t, reduce_reference(inp, op, None, dtype, world))
                        c.digest(label, t)
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
                        c.equal(label, got, want, bitwise=True)
                        c.digest(label, got)
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
        c.equal(label, x, want.to(dtype))
        c.digest(label, x)
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
        c.equal(f"all_reduce {name}", t, want)
        c.digest(f"all_reduce {name}", t)
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
    from process_world import ProcessWorld

    own = backend != "cpu:pycomm"  # the session's worlds use "cpu:pycomm"
    world = ProcessWorld(2, backend=backend) if own else backend_worlds(2)
    try:
        results = world.run(backend_string_case)
    finally:
        if own:
            world.kill() if world.failed else world.close()
    for rank, (name, cpu_name, sub_name, t, u) in enumerate(results):
        assert name == backend, f"rank {rank}: get_backend() is {name!r}"
        assert cpu_name == "pycomm" and sub_name == "pycomm", \
            f"rank {rank}: CPU tensors go to {cpu_name!r} (default group), {sub_name!r} (new_group)"
        assert t == [3.0] * 10 and u == [1.0] * 3, f"rank {rank}: {t}, {u}"
