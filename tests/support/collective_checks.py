"""The backend grids' inputs, references and checks (tests/test_backend_*.py, and the
hierarchical layouts' tests that run the same grids).

Every input is rebuilt from a seed, so each rank knows every rank's input and
computes the expected result locally. Inputs are integers chosen so that no op
can overflow or round (sums and products of small values; fp16 and bf16 within
their exact integer range), hence exact equality. Results that must agree
across ranks (all-reduce, broadcast, all-gather) are digested and compared
bitwise across ranks in the test process.

One process world per world size serves a whole test file (the session's
backend_worlds fixture) and each test runs its whole grid inside one call per
rank: spawning per case is too slow on 2 cores.

PYCOMM_TEST_BACKEND=gloo runs the same files on gloo to check the references
themselves; only then are the cases gloo cannot do (PREMUL_SUM, fp32
accumulation of half types, typed errors) left out.
"""
import hashlib
import zlib

import torch
import torch.distributed as dist

from support.process_world import validating_on_gloo

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

    def equal_everywhere(self, label, got, want, bitwise=False):
        """equal, and got's bits digested: the test compares them across ranks, for results
        every rank must hold bit for bit."""
        self.equal(label, got, want, bitwise)
        self.digest(label, got)

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
