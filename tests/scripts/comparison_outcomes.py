"""One case of compare_with_gloo.py: run on gloo, on pycomm and as the reference, and
classed (the classes: compare_with_gloo.py's docstring)."""
from __future__ import annotations

import hashlib
import warnings

import torch

from comparison_inputs import (OBJECTS, OPAQUE_VALUES, PREMUL_FACTOR, REDUCTIONS, build, call,
                               clone_bits, copy_bits, is_quantized, object_signature,
                               storage_bytes)
from support.dtypes_under_test import COMPLEX, MORE_INTEGERS

CLASSES = ("agree", "gloo wrong", "gloo refuses", "both refuse", "pycomm refuses", "differ",
           "unclear refusal")
# The worst class over the ranks is the case's.
SEVERITY = {c: i for i, c in enumerate(CLASSES)}
SEVERITY["pycomm refuses"] = 10
SEVERITY["differ"] = 11
SEVERITY["unclear refusal"] = 9
TARGET_ZERO = ("pycomm refuses", "differ", "unclear refusal")


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
