"""compare_with_gloo.py's axes and its cases' tensors: values from a seed, each shape and
layout, the calls of each collective, and the bits of what they give."""
from __future__ import annotations

import hashlib
import io
import zlib

import torch
import torch.distributed as dist

# Importable where compare_with_gloo.py put tests/ on the path (or pytest did).
from support.dtypes_under_test import ALL_DTYPES, QUANTIZED

SHAPES = ("0-d", "empty", "1", "7", "2-D transposed", "strided")
REDUCTIONS = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor")
MOVES = ("broadcast", "all_gather", "all_gather_into_tensor", "all_to_all_single", "all_to_all",
         "gather", "scatter", "send_recv")
OBJECTS = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")
COLLECTIVES = REDUCTIONS + MOVES + OBJECTS
OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum")
PREMUL_FACTOR = 2.0


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
