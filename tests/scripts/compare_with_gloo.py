"""Every collective and object collective, on every dtype torch defines and six
shapes and layouts, on gloo and on pycomm side by side, compared bit for bit
against the right result.

    torchrun --nproc_per_node 2 tests/scripts/compare_with_gloo.py   # 3 ranks too
    ... --dtypes bool,int16 --collectives all_reduce,gather --shapes strided --json out.json

Each rank builds its inputs from a seed (so every rank knows every input) and
runs each case three times: on a gloo group, on a pycomm group, and the
*reference*: gloo on contiguous copies of the same tensors, whose results are
written back through the caller's views ("what the same op on a contiguous
copy gives"). Where gloo refuses even that, the reference is gloo on a form it
takes with the same result: the bytes of a moved tensor (uint8), wider integers
for int16/uint16/uint32/uint64 sums (int64), complex as pairs of reals, a sum of
scaled inputs for premul_sum. Where no such form exists (a float8 sum), the
right answer is a clear refusal. What is compared is the whole storage under
every output (outside a strided view's elements too), as bytes, on every rank.

Values are small integers for reductions, so every sum, product and average is
exact in every dtype and any order of the ranks gives the same bits (float16
and bfloat16 sums are accumulated in float32 by pycomm, in the half type by
gloo: with inexact values they differ by design); any bytes for the rest.

Each case lands in one class (the worst over the ranks):
  agree              both give the right result, bit for bit
  gloo wrong         gloo's result differs from the right one; pycomm's is right
                     (or gloo serves a case whose only right answer is a refusal)
  gloo refuses       gloo raises; pycomm gives the right result
  both refuse        both raise (pycomm a TypeError or ValueError naming the argument,
                     or torch raises before any backend is called)
  pycomm refuses     pycomm raises where gloo serves            (target: 0)
  differ             pycomm's result is not the right one       (target: 0)
  unclear refusal    both raise, pycomm with another error type (target: 0)

gloo crashes the process on a 0-d reduce_scatter_tensor output (torch 2.14.1): that
case is not run on gloo (GLOO_CRASHES). COMPARE_TRACE=1 prints each case before it
runs, to find another one.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import os
import sys
import warnings
import zlib
from collections import Counter, defaultdict

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from dtypes_under_test import ALL_DTYPES, COMPLEX, MORE_INTEGERS, QUANTIZED, dtype_name  # noqa: E402

SHAPES = ("0-d", "empty", "1", "7", "2-D transposed", "strided")
REDUCTIONS = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor")
MOVES = ("broadcast", "all_gather", "all_gather_into_tensor", "all_to_all_single", "all_to_all",
         "gather", "scatter", "send_recv")
OBJECTS = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")
COLLECTIVES = REDUCTIONS + MOVES + OBJECTS
OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum")
PREMUL_FACTOR = 2.0

CLASSES = ("agree", "gloo wrong", "gloo refuses", "both refuse", "pycomm refuses", "differ",
           "unclear refusal")
# The worst class over the ranks is the case's.
SEVERITY = {c: i for i, c in enumerate(CLASSES)}
SEVERITY["pycomm refuses"] = 10
SEVERITY["differ"] = 11
SEVERITY["unclear refusal"] = 9
TARGET_ZERO = ("pycomm refuses", "differ", "unclear refusal")


def reduce_op(op):
    if op == "premul_sum":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "product": dist.ReduceOp.PRODUCT,
            "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX, "band": dist.ReduceOp.BAND,
            "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}[op]


# ---------------------------------------------------------------- tensors, bits

def carrier(size):
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(size)


def is_quantized(dtype):
    return dtype in QUANTIZED.values()


def copy_bits(dst, src):
    """dst = src bit for bit, through any strides (torch's copy_ normalises bools
    and has no kernel for the sub-byte dtypes)."""
    if dst.numel() == 0:
        return
    c = carrier(src.element_size())
    if c is None or src.is_conj() or src.is_neg() or is_quantized(src.dtype):
        dst.copy_(src)
        return
    dst.view(c).copy_(src.view(c))


def clone_bits(t):
    if is_quantized(t.dtype):
        return t.clone()
    out = torch.empty(t.shape, dtype=t.dtype)
    copy_bits(out, t)
    return out


def storage_bytes(t):
    """The bytes of a contiguous base tensor (what is compared)."""
    if t is None:
        return b""
    if is_quantized(t.dtype):
        t = t.int_repr()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def generator(*key):
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def values(shape, dtype, mode, g, world):
    """A contiguous tensor of `shape`: small integers (mode 'small', 'avg': times the
    world size, so every average is exact), or any bits ('bits'; bool: 0 or 1)."""
    n = int(torch.Size(shape).numel())
    if dtype == torch.bool:
        return (torch.randint(0, 2, (n,), generator=g) == 1).reshape(shape)
    if mode != "bits" and (dtype.is_floating_point or dtype.is_complex or dtype in (
            torch.int8, torch.int16, torch.int32, torch.int64)) and dtype not in OPAQUE_VALUES:
        lanes = 2 if dtype.is_complex else 1
        x = torch.randint(-2, 3, (n * lanes,), generator=g)
        if mode == "avg":
            x = x * world
        out = torch.empty(shape, dtype=dtype)
        real = torch.view_as_real(out) if dtype.is_complex else out
        real.copy_(x.reshape(real.shape).to(real.dtype))
        return out
    if mode != "bits" and dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64):
        x = torch.randint(0, 4, (n,), generator=g) * (world if mode == "avg" else 1)
        return x.to(dtype).reshape(shape)
    out = torch.empty(shape, dtype=dtype)
    raw = torch.randint(0, 256, (n * dtype.itemsize,), generator=g, dtype=torch.uint8)
    if n:
        out.reshape(-1).view(torch.uint8).copy_(raw)
    return out


# Dtypes whose "small integers" are their bytes: no arithmetic, no conversion.
OPAQUE_VALUES = {d for n, d in ALL_DTYPES.items()
                 if n.startswith(("float8", "float4", "bits", "int", "uint"))
                 and d not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                               torch.uint16, torch.uint32, torch.uint64)}

BASE_BYTE = 0x5A  # every byte of a base tensor outside its view


def layout(kind, dtype, lead, allow_0d=True):
    """(view, base): a tensor of the case's shape and layout; `lead` scales its
    first dimension (world-sized outputs and inputs)."""
    if kind == "0-d":
        shape, make = ((), None) if lead == 1 and allow_0d else ((lead,), None)
    elif kind == "empty":
        shape, make = (0,), None
    elif kind == "1":
        shape, make = (lead,), None
    elif kind == "7":
        shape, make = (7 * lead,), None
    elif kind == "2-D transposed":
        shape, make = (4, 3 * lead), "t"
    elif kind == "strided":
        shape, make = (3 * lead, 8), "step"
    else:
        raise ValueError(kind)
    if is_quantized(dtype):
        base = torch.quantize_per_tensor(torch.zeros(shape), 1.0, 0, dtype)
    else:
        base = torch.empty(shape, dtype=dtype)
        if base.numel():
            base.reshape(-1).view(torch.uint8).fill_(BASE_BYTE)
    view = base.t() if make == "t" else base[:, ::2] if make == "step" else base
    return view, base


class Tensors:
    """One rank's arguments of one case: views (what the call takes), their bases
    (what is compared), and which are outputs on this rank."""

    def __init__(self):
        self.args = {}  # name -> view or list of views (or None)
        self.bases = []  # (name, base, view, is_output)
        self.outputs = set()  # the names in args this rank's call writes

    def add(self, name, kind, dtype, lead, output, fill=None, allow_0d=True):
        view, base = layout(kind, dtype, lead, allow_0d)
        if fill is not None and not is_quantized(dtype):
            copy_bits(view, fill(view.shape))
        self.bases.append((name, base, view, output))
        return view


def build(coll, dtype, kind, op, rank, world, key):
    """This rank's arguments for the case; the same on every rank for rank r."""
    root = world - 1
    mode = "bits" if op is None else "avg" if op == "avg" else "small"

    def fill_of(r, tag):
        g = generator(key, r, tag)
        return lambda shape: values(shape, dtype, mode, g, world)

    T = Tensors()
    a = T.args
    T.outputs = {
        "all_reduce": {"t"}, "reduce": {"t"} if rank == root else set(),
        "reduce_scatter": {"out"}, "reduce_scatter_tensor": {"out"},
        "broadcast": {"t"} if rank != root else set(), "all_gather": {"outs"},
        "all_gather_into_tensor": {"out"}, "all_to_all_single": {"out"}, "all_to_all": {"outs"},
        "gather": {"outs"} if rank == root else set(), "scatter": {"out"}, "send_recv": {"recv"},
    }.get(coll, set())
    if coll in ("all_reduce", "reduce"):
        a["t"] = T.add("t", kind, dtype, 1, coll == "all_reduce" or rank == root, fill_of(rank, "t"))
    elif coll == "reduce_scatter":
        a["out"] = T.add("out", kind, dtype, 1, True)
        a["ins"] = [T.add(f"in{i}", kind, dtype, 1, False, fill_of(rank, f"in{i}"))
                    for i in range(world)]
    elif coll == "reduce_scatter_tensor":
        a["out"] = T.add("out", kind, dtype, 1, True)
        a["in"] = T.add("in", kind, dtype, world, False, fill_of(rank, "in"))
    elif coll == "broadcast":
        a["t"] = T.add("t", kind, dtype, 1, rank != root, fill_of(rank, "t"))
    elif coll == "all_gather":
        a["outs"] = [T.add(f"out{i}", kind, dtype, 1, True) for i in range(world)]
        a["in"] = T.add("in", kind, dtype, 1, False, fill_of(rank, "in"))
    elif coll == "all_gather_into_tensor":
        a["out"] = T.add("out", kind, dtype, world, True)
        a["in"] = T.add("in", kind, dtype, 1, False, fill_of(rank, "in"))
    elif coll == "all_to_all_single":
        lead = 1 if kind == "0-d" else world  # a 0-d tensor stays one (and cannot split)
        a["out"] = T.add("out", kind, dtype, lead, True)
        a["in"] = T.add("in", kind, dtype, lead, False, fill_of(rank, "in"))
    elif coll == "all_to_all":
        a["outs"] = [T.add(f"out{i}", kind, dtype, 1, True) for i in range(world)]
        a["ins"] = [T.add(f"in{i}", kind, dtype, 1, False, fill_of(rank, f"in{i}"))
                    for i in range(world)]
    elif coll == "gather":
        a["in"] = T.add("in", kind, dtype, 1, False, fill_of(rank, "in"))
        a["outs"] = [T.add(f"out{i}", kind, dtype, 1, True) for i in range(world)] \
            if rank == root else None
    elif coll == "scatter":
        a["out"] = T.add("out", kind, dtype, 1, True)
        a["ins"] = [T.add(f"in{i}", kind, dtype, 1, False, fill_of(rank, f"in{i}"))
                    for i in range(world)] if rank == root else None
    elif coll == "send_recv":
        a["send"] = T.add("send", kind, dtype, 1, False, fill_of(rank, "send"))
        a["recv"] = T.add("recv", kind, dtype, 1, True)
    elif coll in OBJECTS:
        a["obj"] = T.add("obj", kind, dtype, 1, False, fill_of(rank, "obj"))
    return T


def call(coll, a, op, group, world, rank):
    """Runs the collective on `group` with the arguments `a` (views, in place);
    object collectives return what they received."""
    root = world - 1
    groot = root  # ranks of the group are the global ranks here
    if coll == "all_reduce":
        dist.all_reduce(a["t"], op=reduce_op(op), group=group)
    elif coll == "reduce":
        dist.reduce(a["t"], dst=groot, op=reduce_op(op), group=group)
    elif coll == "reduce_scatter":
        dist.reduce_scatter(a["out"], a["ins"], op=reduce_op(op), group=group)
    elif coll == "reduce_scatter_tensor":
        dist.reduce_scatter_tensor(a["out"], a["in"], op=reduce_op(op), group=group)
    elif coll == "broadcast":
        dist.broadcast(a["t"], src=groot, group=group)
    elif coll == "all_gather":
        dist.all_gather(a["outs"], a["in"], group=group)
    elif coll == "all_gather_into_tensor":
        dist.all_gather_into_tensor(a["out"], a["in"], group=group)
    elif coll == "all_to_all_single":
        dist.all_to_all_single(a["out"], a["in"], group=group)
    elif coll == "all_to_all":
        dist.all_to_all(a["outs"], a["ins"], group=group)
    elif coll == "gather":
        dist.gather(a["in"], a["outs"], dst=groot, group=group)
    elif coll == "scatter":
        dist.scatter(a["out"], a["ins"], src=groot, group=group)
    elif coll == "send_recv":
        works = [dist.isend(a["send"], (rank + 1) % world, group=group),
                 dist.irecv(a["recv"], (rank - 1) % world, group=group)]
        for w in works:
            w.wait()
    elif coll in OBJECTS and not picklable(a["obj"]):
        # torch.save refuses this dtype on the ranks that pickle it; raised on
        # every rank here, so that no rank waits for one that never sends.
        torch.save(a["obj"], io.BytesIO())
    elif coll == "all_gather_object":
        out = [None] * world
        dist.all_gather_object(out, {"t": a["obj"]}, group=group)
        return out
    elif coll == "broadcast_object_list":
        lst = [{"t": a["obj"]}] if rank == root else [None]
        dist.broadcast_object_list(lst, src=groot, group=group)
        return lst
    elif coll == "gather_object":
        out = [None] * world if rank == root else None
        dist.gather_object({"t": a["obj"]}, out, dst=groot, group=group)
        return out
    elif coll == "scatter_object_list":
        mine = [None]
        objs = None
        if rank == root:
            objs = [{"t": a["obj"], "to": r} for r in range(world)]
        dist.scatter_object_list(mine, objs, src=groot, group=group)
        return mine
    return None


def picklable(t):
    try:
        torch.save({"t": t}, io.BytesIO())
        return True
    except Exception:  # noqa: BLE001
        return False


def object_signature(received):
    """What was received, bit for bit: each tensor's dtype, shape and value bytes."""
    if received is None:
        return None
    out = []
    for obj in received:
        if obj is None:
            out.append(None)
            continue
        t = obj["t"]
        try:
            bits = storage_bytes(clone_bits(t))
        except Exception as e:  # noqa: BLE001 - torch copies no quint2x4: its repr stands in
            bits = f"{type(e).__name__} {t.int_repr() if is_quantized(t.dtype) else ''}"
        out.append((str(t.dtype), tuple(t.shape), bits, obj.get("to")))
    return hashlib.sha1(repr(out).encode()).hexdigest()


# ---------------------------------------------------------------- one case

class Outcome:
    def __init__(self, ok, result=None, error=None):
        self.ok, self.result, self.error = ok, result, error


# Cases on which gloo crashes the process (a segmentation fault, torch 2.14.1):
# not run on gloo, and counted as gloo's refusal.
GLOO_CRASHES = {("reduce_scatter_tensor", "0-d")}

# Cases with no right result but a refusal, whatever gloo does: a 0-d tensor has
# no dim 0 to split between ranks. torch 2.14 refuses it before any backend;
# torch 2.13's gloo runs it and reads and writes past the tensor's one element.
# (A complex one is not in it: torch hands the backend its two reals.)
NO_RIGHT_RESULT = {("all_to_all_single", "0-d")}


def run(coll, dtype, kind, op, rank, world, key, group, transform=None, gloo=False):
    """Builds the case's tensors and runs it on `group` (`gloo`: a gloo group);
    `transform` (reference only) turns the views into contiguous copies of a form
    gloo takes, and back."""
    if gloo and transform is None and (coll, kind) in GLOO_CRASHES:
        return Outcome(False, error="not run: gloo crashes the process on this case")
    T = build(coll, dtype, kind, op, rank, world, key)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if transform is None:
                received = call(coll, T.args, op, group, world, rank)
            else:
                received = transform(T.args, T.outputs,
                                     lambda args, o: call(coll, args, o, group, world, rank))
            if coll in OBJECTS:
                return Outcome(True, result=object_signature(received))
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        return Outcome(False, error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    sha = lambda b: hashlib.sha1(b).hexdigest()  # noqa: E731
    return Outcome(True, result=tuple(
        (name, output, sha(storage_bytes(clone_bits(view))), sha(storage_bytes(base)))
        for name, base, view, output in T.bases))


def map_args(args, fn):
    return {k: (None if v is None else [fn(x) for x in v] if isinstance(v, list) else fn(v))
            for k, v in args.items()}


def contiguous_reference(form, op, scale=None, truth=False):
    """A transform for run(): the views' contiguous copies in `form` (None: as they
    are; premul_sum's inputs times `scale`), the call with `op`, then the outputs
    written back through the views (`truth`: bools as their truth value)."""
    def to_form(v):
        # A 0-d tensor as its one element (gloo crashes on some 0-d outputs).
        c = clone_bits(v).reshape(-1) if v.dim() == 0 else clone_bits(v)
        if form is None:
            return c
        if form == "bytes":
            return c.view(torch.uint8)
        if form == "real":
            return torch.view_as_real(c)
        if form == "int64":
            return c.to(torch.int64)
        raise ValueError(form)

    def from_form(v, c):
        if truth and v.dtype == torch.bool:
            c = c.view(torch.uint8) != 0 if c.dtype == torch.bool else c
        if form is None:
            copy_bits(v, c.reshape(v.shape))
        elif form == "bytes":
            copy_bits(v, c.view(v.dtype).reshape(v.shape))
        elif form == "real":
            copy_bits(v, real_to_complex(c, v.dtype).reshape(v.shape))
        elif form == "int64":
            v.copy_(c.to(v.dtype).reshape(v.shape))

    def transform(args, outputs, do):
        copies = map_args(args, to_form)
        for k in ("t", "in", "ins") if scale is not None else ():
            v = copies.get(k)
            for c in [] if v is None else v if isinstance(v, list) else [v]:
                c.mul_(scale)
        received = do(copies, op)
        for k in outputs:
            v = args[k]
            vs, cs = (v, copies[k]) if isinstance(v, list) else ([v], [copies[k]])
            for view, c in zip(vs, cs):
                from_form(view, c)
        return received
    return transform


def real_to_complex(c, dtype):
    out = torch.empty(c.shape[:-1], dtype=dtype)
    copy_bits(torch.view_as_real(out), c)
    return out


def reference(coll, dtype, kind, op, rank, world, key, group):
    """The right result: gloo on contiguous copies, or on a form it takes."""
    def attempt(form, op_used, scale=None):
        # premul_sum: the inputs scaled first, then summed. A reduced bool is its
        # truth value, 0 or 1 (gloo's all_reduce and reduce add the bytes).
        return run(coll, dtype, kind, op, rank, world, key, group,
                   transform=contiguous_reference(form, op_used, scale, truth=coll in REDUCTIONS))

    if coll in OBJECTS:
        # Each rank's object is rebuilt here: what should arrive is the sender's.
        root = world - 1
        objs = [build(coll, dtype, kind, None, r, world, key).args["obj"] for r in range(world)]
        if coll == "all_gather_object":
            want = [{"t": objs[r]} for r in range(world)]
        elif coll == "broadcast_object_list":
            want = [{"t": objs[root]}]
        elif coll == "gather_object":
            want = [{"t": objs[r]} for r in range(world)] if rank == root else None
        else:
            want = [{"t": objs[root], "to": rank}]
        try:
            return Outcome(True, result=object_signature(want))
        except Exception as e:  # noqa: BLE001 - a tensor torch cannot copy: no right result
            return Outcome(False, error=f"{type(e).__name__}: {e}")
    if (coll, kind) in NO_RIGHT_RESULT and world > 1 and not dtype.is_complex:
        return Outcome(False, error=f"no right result: {coll} of a {kind} tensor over {world} ranks")
    reduces = coll in REDUCTIONS
    premul = op == "premul_sum"
    first = attempt(None, op if not premul else "sum", PREMUL_FACTOR if premul else None)
    if first.ok:
        return first
    if is_quantized(dtype) or dtype in OPAQUE_VALUES and reduces:
        return first  # no arithmetic: the right answer is a refusal
    if not reduces:
        return attempt("bytes", op)
    if dtype in MORE_INTEGERS.values() and op not in ("avg", "premul_sum"):
        return attempt("int64", op)
    if dtype in COMPLEX.values() and op in ("sum", "avg", "premul_sum"):
        return attempt("real", "sum" if premul else op, PREMUL_FACTOR if premul else None)
    return first


def how_wrong(got, want):
    """What differs between two tensor results (run()'s per-tensor digests)."""
    if got is None or want is None or isinstance(got, str) or isinstance(want, str):
        return "the objects received"
    for (name, output, view, storage), (_, _, view_w, storage_w) in zip(got, want):
        if not output and (view, storage) != (view_w, storage_w):
            return "writes a tensor this rank only sends"
        if view != view_w:
            return "wrong values in an output"
        if storage != storage_w:
            return "writes outside an output's view"
    return "?"


TORCH_REFUSES = "NotImplementedError: Could not run 'c10d::"


def step_code(outcome):
    """0: done; 1: refused before anything was sent; 2: failed talking to the
    peers (a timeout, an abort), which leaves the group unusable."""
    if outcome.ok:
        return 0
    talking = ("Timeout", "timed out", "Timed out", "aborted", "DistBackendError", "CommError",
               "Connection", "closed")
    return 2 if any(w in outcome.error for w in talking) else 1


def classify(gloo, pycomm, ref):
    """(class, detail) of one case on one rank."""
    if not pycomm.ok:
        # pycomm's own refusal, or torch's before any backend ran (the same error
        # as gloo's, or its dispatcher's for quantized tensors).
        typed = pycomm.error.startswith(("TypeError", "ValueError", TORCH_REFUSES)) or \
            pycomm.error == gloo.error
        if gloo.ok and not ref.ok and ref.error.startswith("no right result"):
            # gloo serves a case whose only right answer is a refusal.
            return ("gloo wrong" if typed else "unclear refusal"), ref.error
        if gloo.ok:
            return "pycomm refuses", pycomm.error
        return ("both refuse" if typed else "unclear refusal"), pycomm.error
    if not ref.ok:
        return "differ", f"pycomm serves, but the right answer is a refusal: {ref.error}"
    if pycomm.result != ref.result:
        return "differ", how_wrong(pycomm.result, ref.result)
    if not gloo.ok:
        return "gloo refuses", gloo.error
    if gloo.result != pycomm.result:
        return "gloo wrong", how_wrong(gloo.result, ref.result)
    return "agree", None


# ---------------------------------------------------------------- the grid

def cases(dtypes, collectives, shapes, ops=OPS):
    for coll in collectives:
        for name in dtypes:
            for kind in shapes:
                for op in (ops if coll in REDUCTIONS else (None,)):
                    yield coll, name, kind, op


class Groups:
    """A gloo group and a pycomm group over every rank, made again after a case
    left one of them out of step (some rank raised where another did not), and a
    gloo group that only says how each case went."""

    def __init__(self, pycomm_backend, timeout_s):
        self.pycomm_backend, self.timeout = pycomm_backend, datetime.timedelta(seconds=timeout_s)
        self.control = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=600))
        self.gloo = self.pycomm = None
        self.remake(gloo=True, pycomm=True)

    def remake(self, gloo, pycomm):
        if gloo:
            old, self.gloo = self.gloo, dist.new_group(backend="gloo", timeout=self.timeout)
            self.drop(old)
        if pycomm:
            old, self.pycomm = self.pycomm, dist.new_group(backend=self.pycomm_backend,
                                                           timeout=self.timeout)
            self.drop(old)

    @staticmethod
    def drop(group):
        if group is not None:
            try:
                dist.destroy_process_group(group)
            except Exception:  # noqa: BLE001 - a broken group may not close cleanly
                pass

    def in_step(self, *outcomes):
        """For each run: whether its group is still usable, that is no rank failed
        talking to its peers and every rank got to the same kind of end."""
        mine = torch.tensor([step_code(o) for o in outcomes], dtype=torch.int64)
        lo, hi = mine.clone(), mine.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=self.control)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=self.control)
        return [a == b and b < 2 for a, b in zip(lo.tolist(), hi.tolist())]


def compare(dtypes=None, collectives=COLLECTIVES, shapes=SHAPES, ops=OPS,
            pycomm_backend="pycomm", timeout_s=20.0, progress=False, guard_pycomm=False):
    """Runs the grid on this rank; returns {case: (class, gloo error, pycomm error)}
    for this rank. Every rank calls it with the same arguments. guard_pycomm: skip
    on pycomm too the cases gloo crashes on (for a build that forwards some of
    them to its gloo fallback)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    dtypes = list(ALL_DTYPES) if dtypes is None else list(dtypes)
    groups = Groups(pycomm_backend, timeout_s)
    out = {}
    all_cases = list(cases(dtypes, collectives, shapes, ops))
    for i, (coll, name, kind, op) in enumerate(all_cases):
        if os.environ.get("COMPARE_TRACE"):
            print(f"rank {rank} case {i}: {coll} {name} {kind} {op}", flush=True)
        dtype = ALL_DTYPES[name]
        key = (coll, name, kind, op, world)
        g = run(coll, dtype, kind, op, rank, world, key, groups.gloo, gloo=True)
        p = run(coll, dtype, kind, op, rank, world, key, groups.pycomm, gloo=guard_pycomm)
        gloo_step, pycomm_step = groups.in_step(g, p)
        if not gloo_step:
            groups.remake(gloo=True, pycomm=False)
        r = reference(coll, dtype, kind, op, rank, world, key, groups.gloo)
        ref_step, = groups.in_step(r)
        if not ref_step or not pycomm_step:
            groups.remake(gloo=not ref_step, pycomm=not pycomm_step)
        out[(coll, name, kind, op)] = classify(g, p, r)
        if progress and rank == 0 and (i + 1) % 500 == 0:
            print(f"  {i + 1} of {len(all_cases)} cases", flush=True)
    Groups.drop(groups.gloo)
    Groups.drop(groups.pycomm)
    Groups.drop(groups.control)
    return out


def combine(per_rank):
    """The case's class over the ranks: the worst (with its detail)."""
    combined = {}
    for results in per_rank:
        for case, (cls, detail) in results.items():
            prev = combined.get(case)
            if prev is None or SEVERITY[cls] > SEVERITY[prev[0]]:
                combined[case] = (cls, detail)
    return combined


def summary(combined, world):
    counts = Counter(cls for cls, _ in combined.values())
    colls, names, kinds, ops = (sorted({case[i] for case in combined}, key=str) for i in range(4))
    ops = [o for o in ops if o]
    lines = [f"pycomm against gloo, {world} ranks, torch {torch.__version__}: {len(combined)} cases "
             f"({len(colls)} collectives x {len(names)} dtypes x {len(kinds)} shapes, "
             f"x {len(ops)} ops where they reduce), bit for bit against the right result"]
    for cls in CLASSES:
        target = "   (target: 0)" if cls in TARGET_ZERO else ""
        lines.append(f"  {cls:<16} {counts.get(cls, 0):>6}{target}")
    # Each class by what happened (the error, or what differs), with the
    # collectives it happened in and one example.
    groups = defaultdict(lambda: [0, Counter(), None])
    for (coll, name, kind, op), (cls, detail) in sorted(combined.items(), key=str):
        if cls == "agree":
            continue
        g = groups[(cls, short_reason(detail))]
        g[0] += 1
        g[1][coll] += 1
        if g[2] is None:
            g[2] = f"{coll} {name} {kind}" + (f" {op}" if op else "")
    for cls in CLASSES[1:]:
        rows = sorted(((n, reason, colls, example) for (c, reason), (n, colls, example)
                       in groups.items() if c == cls), key=lambda r: (-r[0], r[1]))
        if not rows:
            continue
        lines.append(f"{cls}:")
        for n, reason, colls, example in rows:
            lines.append(f"  {n:>5}  {reason}")
            lines.append(f"         in {', '.join(sorted(colls))}; e.g. {example}")
    return "\n".join(lines)


def short_reason(detail):
    """An error or difference without what names one case (dtypes, ops, sizes)."""
    import re
    if not detail:
        return ""
    text = detail.split("; ")[0].split(". ")[0]
    text = re.sub(r"torch\.\w+|'c10d::\w+'|'\w+'|RedOpType\.\w+|\(.*?\)|\d+", "#", text)
    return text[:120]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", help="comma-separated names (default: every torch dtype)")
    ap.add_argument("--collectives", help="comma-separated (default: all)")
    ap.add_argument("--shapes", help=f"comma-separated of: {', '.join(SHAPES)}")
    ap.add_argument("--ops", help=f"comma-separated of: {', '.join(OPS)}")
    ap.add_argument("--json", help="write every case's class and errors here (rank 0)")
    ap.add_argument("--list", action="store_true", help="print every case that is not 'agree'")
    ap.add_argument("--guard-pycomm", action="store_true",
                    help="do not run on pycomm the cases gloo crashes on either (for pycomm builds "
                         "that forward some of them to gloo, as those before every dtype was native)")
    args = ap.parse_args(argv)
    import pycomm  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    split = lambda s, default: tuple(s.split(",")) if s else default  # noqa: E731
    results = compare(dtypes=split(args.dtypes, None), collectives=split(args.collectives, COLLECTIVES),
                      shapes=split(args.shapes, SHAPES), ops=split(args.ops, OPS), progress=True,
                      guard_pycomm=args.guard_pycomm)
    gathered = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        combined = combine(gathered)
        print(summary(combined, world), flush=True)
        if args.list:
            for case, (cls, detail) in sorted(combined.items(), key=str):
                if cls != "agree":
                    print(f"{cls:<16} {case}  {detail}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump([{"collective": c, "dtype": n, "shape": k, "op": o, "class": cls,
                            "detail": detail}
                           for (c, n, k, o), (cls, detail) in sorted(combined.items(), key=str)],
                          f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
