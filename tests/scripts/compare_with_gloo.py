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
import json
import os
import sys
from collections import Counter, defaultdict

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from support.dtypes_under_test import ALL_DTYPES  # noqa: E402
from comparison_inputs import COLLECTIVES, OPS, REDUCTIONS, SHAPES  # noqa: E402
from comparison_outcomes import CLASSES, SEVERITY, TARGET_ZERO, classify, reference, run, \
    step_code  # noqa: E402

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
