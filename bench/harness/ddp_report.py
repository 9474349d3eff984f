"""Rank 0's text of bench/ddp_resnet50.py: the modes' table, the targets, where a step goes,
and the scaling model against the measurement.

The targets, judged on the rounds' ratios (median and range; harness/verdicts.py): ring and
backend at most NO_COMM_TARGET x the sync-only step (and the no-comm step), backend at most
the ring's step + BACKEND_OVER_RING. When the ranks' compute threads fill every core, whatever
CPU time the all-reduce takes comes out of theirs, so a mode's step cannot go below sync-only
+ N x (the CPU time its buckets take alone) / cores: the report prints that floor."""
from __future__ import annotations

import math
import sys

from . import verdicts
from .driver import write_json
from .table import Column, Table

NO_COMM_TARGET = 1.03
BACKEND_OVER_RING = 0.01


def _range(key):
    """A ratio's range over the rounds, "min-max"."""
    def show(r):
        lo, hi = r.get(key + "_min"), r.get(key + "_max")
        return None if lo is None or hi is None else f"{lo:.3f}-{hi:.3f}"
    return show


MODE_TABLE = Table([
    Column("mode", 10, "mode", align="<"), Column("N", 3, "world_size", "d"),
    Column("step ms", 8, "step_time_s", ".1f", 1e3), None,
    Column("/no-comm", 8, "over_no_comm", ".3f"), Column("rounds", 11, _range("over_no_comm")),
    Column("/sync-only", 10, "over_sync_only", ".3f"),
    Column("rounds", 11, _range("over_sync_only")), None,
    Column("images/s", 8, "images_per_s", ".1f"), Column("speedup", 7, "speedup", ".3f"),
    Column("eff", 6, "efficiency", ".1%"), None,
    Column("comm ms", 7, "comm_s", ".1f", 1e3), Column("exposed", 7, "exposed_comm_s", ".1f", 1e3),
    Column("share", 6, "comm_share", ".1%"), None,
    Column("alone ms", 8, "comm_alone_s", ".1f", 1e3),
    Column("share", 6, "comm_alone_share", ".1%"), Column("cpu ms", 6, "comm_alone_cpu_s", ".1f", 1e3),
    None,
    Column("Amdahl f", 8, "amdahl_f", ".3f")])


def _part(name, group=None):
    """A breakdown cell: a part of the step, or a thread group's CPU time per step."""
    return lambda r: r["cpu"].get(group) if group else r.get(name)


BREAKDOWN_TABLE = Table([
    Column("mode", 10, "mode", align="<"), Column("N", 3, "world_size", "d"),
    Column("rank", 4, "rank", "d"), Column("forward", 7, _part("forward"), ".1f", 1e3),
    Column("backward", 8, _part("backward"), ".1f", 1e3),
    Column("finalize", 8, _part("finalize"), ".2f", 1e3),
    Column("optim", 6, _part("optimizer"), ".1f", 1e3), None,
    Column("buckets", 7, _part("buckets"), ".0f"), Column("queue", 6, _part("queue"), ".2f", 1e3),
    Column("run", 6, _part("run"), ".2f", 1e3), Column("complete", 8, _part("complete"), ".2f", 1e3),
    Column("in flight", 9, _part("in_flight"), ".1f", 1e3), None,
    Column("main cpu", 8, _part("", "main"), ".1f", 1e3),
    Column("worker", 6, _part("", "pycomm-worker"), ".2f", 1e3),
    Column("lane", 6, _part("", "pycomm-lane"), ".2f", 1e3),
    Column("other", 6, _part("", "other"), ".2f", 1e3)])


def _predicted(field):
    return lambda r: r["prediction"][field]


PREDICTION_TABLE = Table([
    Column("mode", 10, "mode", align="<"), Column("N", 3, "world_size", "d"),
    Column("alpha us", 8, lambda r: r["calibration"]["alpha_s"], ".1f", 1e6),
    Column("B GB/s", 7, lambda r: r["calibration"]["bandwidth_Bps"] or math.inf, ".2f", 1e-9),
    Column("buckets", 7, "buckets", "d"), Column("MB", 7, lambda r: sum(r["wire_bytes"]), ".1f", 1e-6),
    Column("model comm ms", 13, _predicted("comm_s"), ".1f", 1e3), None,
    Column("predicted ms", 12, _predicted("predicted_step_s"), ".1f", 1e3),
    Column("full-overlap", 12, _predicted("full_overlap_step_s"), ".1f", 1e3), None,
    Column("measured ms", 11, "step_time_s", ".1f", 1e3),
    Column("error", 7, _predicted("relative_error"), "+.1%")])


def floor_over_sync_only(record, sync):
    """The least step / sync-only step a mode can reach when its ranks' compute threads
    already fill every core: whatever CPU time its all-reduce takes (measured alone) comes
    out of theirs. None where cores are left over, or nothing was measured."""
    if sync is None or not record.get("comm_alone_cpu_s") or record["device"] != "cpu":
        return None
    n, cores = record["world_size"], record["cores"]
    if n * record["threads"] < cores:
        return None
    return 1 + n * record["comm_alone_cpu_s"] / (cores * sync["step_time_s"])


def _judged(spread, target, unit="x"):
    """'1.034x (1.019-1.072, met)': a ratio over the rounds and its verdict."""
    med, lo, hi = spread
    return f"{med:.3f}{unit} ({lo:.3f}-{hi:.3f}, {verdicts.verdict_text(spread, target)})"


def targets(records):
    """The target lines: ring and backend against sync-only and no-comm, and backend against
    the ring, each from the rounds' ratios (median, and range over the rounds)."""
    lines = []
    for n in sorted({r["world_size"] for r in records if r["mode"] != "baseline"}):
        if n < 2:
            continue
        by_mode = {r["mode"]: r for r in records
                   if r["world_size"] == n and r.get("round_step_times_s")}
        judged = [by_mode[m] for m in ("ring", "backend") if m in by_mode]
        for key, ceiling in (("over_sync_only", "sync-only"), ("over_no_comm", "no-comm")):
            got = [r for r in judged if r.get(key) is not None]
            if got:
                lines.append(
                    f"# target N={n}: ring and backend at most {NO_COMM_TARGET:g}x the {ceiling} "
                    "step: " + "; ".join(
                        f"{r['mode']} "
                        f"{_judged((r[key], r[key + '_min'], r[key + '_max']), NO_COMM_TARGET)}"
                        for r in got))
        if "backend" in by_mode and "ring" in by_mode:
            over_ring = verdicts.ratio(by_mode["backend"]["round_step_times_s"],
                                       by_mode["ring"]["round_step_times_s"], paired=True)
            lines.append(f"# target N={n}: backend at most the ring's step + "
                         f"{BACKEND_OVER_RING:.0%}: backend/ring "
                         f"{_judged(over_ring, 1 + BACKEND_OVER_RING, unit='')}")
        sync = by_mode.get("sync-only")
        floors = [(r["mode"], floor_over_sync_only(r, sync)) for r in judged]
        floors = [(m, f) for m, f in floors if f is not None]
        if floors:
            lines.append(f"# N={n}: the floor when the ranks' compute threads fill every core "
                         "(sync-only + the CPU time the same buckets take alone, ranks x cpu ms "
                         "/ cores): " + "; ".join(f"{m} {f:.3f}x" for m, f in floors))
        if sync is not None and sync.get("over_no_comm") is not None:
            lines.append(f"# N={n}: sync-only/no-comm {sync['over_no_comm']:.3f} "
                         f"({sync['over_no_comm_min']:.3f}-{sync['over_no_comm_max']:.3f}): what "
                         "waiting for the slowest rank at each bucket costs, with no bytes moved")
    return lines


def report(records, args):
    base = next((r for r in records if r["mode"] == "baseline"), None)
    first = next(r for r in records if r["mode"] != "baseline")
    sizes = sorted({r["world_size"] for r in records if r["mode"] != "baseline"})
    print(f"# {first['model']} under DDP on {first['device']} ({first['backend']}): "
          f"N = {', '.join(map(str, sizes))}; {first['image_size']}x{first['image_size']} "
          f"images, batch {first['batch_size']} per rank, {first['threads']} thread(s) per rank; "
          f"the modes in turns, {first['rounds']} rounds of {first['steps']} timed steps each, "
          f"after {first['warmup']} warm-up; a step's time is the slowest rank's, and the "
          "table gives the median")
    crowded = [n for n in sizes if first["device"] == "cpu" and n * first["threads"] > first["cores"]]
    if crowded:
        print(f"# OVERSUBSCRIBED: N = {', '.join(map(str, crowded))} ranks x {first['threads']} "
              f"thread(s) on {first['cores']} cores: the ranks take turns on the cores, and "
              "pycomm's worker takes its time from them; every mode pays it, no-comm too")
    if args.gpus and max(sizes) > args.gpus:
        print(f"# {max(sizes)} ranks share {args.gpus} GPU(s): without MPS their kernels take "
              f"turns on each GPU, so the step times compare the all-reduces' cost to the ranks, "
              f"not a multi-GPU step (no NVLink traffic, no overlap across GPUs)")
    if args.stock_reason:
        print(f"# stock backend {args.stock_backend}, not NCCL: {args.stock_reason}")
    elif first.get("nccl"):
        print(f"# stock backend NCCL {first['nccl']}")
    if base:
        print(f"# 1-rank baseline (rank 0 alone, no DDP): T1 = {base['step_time_s'] * 1e3:.1f} ms "
              f"per step, {base['images_per_s']:.1f} images/s")
    else:
        print("# no 1-rank baseline (--no-baseline): no speedup, efficiency or Amdahl f")
    header = MODE_TABLE.header()
    print(header)
    print("-" * len(header))
    for r in records:
        if r["mode"] == "baseline":
            continue
        if not r["available"]:
            print(MODE_TABLE.row(r, upto=2, note=f"unavailable: {r['reason']}"))
            continue
        print(MODE_TABLE.row(r))
    print("# /no-comm, /sync-only: the median over the rounds of step / that mode's step in the "
          "same round (no-comm: communication costs nothing; sync-only: one element per bucket, "
          "so only the waiting for the slowest rank), and the rounds' range; comm: time a "
          "bucket was in flight per step (hook futures; '-': no hook); exposed: the wait after "
          "backward; alone: the same buckets all-reduced with no compute, and its cpu: the CPU "
          "time per call of the threads besides the caller's (pycomm's worker and lane, or "
          "gloo's), per rank; share = of the step")
    for line in targets(records):
        print(line)
    rows = [dict(part, mode=r["mode"], world_size=r["world_size"], rank=rank) for r in records
            for rank, part in enumerate(r.get("breakdown") or []) if part]
    if rows:
        print("# where a step goes, per rank, ms (medians over the timed steps; "
              "harness/step_parts.py): forward, backward (its finalize: after the last "
              "bucket's hand-over), optimizer; per step, summed over the buckets' pycomm jobs: "
              "queued, running, to completion; CPU time per step of the compute thread, "
              "pycomm's worker and completion lane, and the other threads")
        print(BREAKDOWN_TABLE.header())
        for row in rows:
            print(BREAKDOWN_TABLE.row(row))
    slow = [r for r in records if r.get("speedup") and r["world_size"] > 1 and r["speedup"] < 1]
    if slow and not any(r["mode"] == "no-comm" for r in records):
        print("# speedup < 1: if the ranks outnumber the free cores, they slow each other's "
              "compute too; add no-comm to --modes to measure N ranks computing with no "
              "communication")
    preds = [r for r in records if r.get("prediction") or isinstance(r.get("calibration"), str)]
    if preds:
        print("# scaling model (pycomm.tools.scaling, alpha-beta ring, no overlap; full overlap "
              "is the lower bound) vs the measured step; alpha, B fitted to "
              + ("an all-reduce sweep in this run" if not args.calibration else args.calibration))
        print(PREDICTION_TABLE.header())
        for r in preds:
            if r.get("prediction") is None:
                print(PREDICTION_TABLE.row(r, upto=2, note=r["calibration"]))
                continue
            print(PREDICTION_TABLE.row(r))
            q = r.get("prediction_no_comm_compute")
            if q:
                print(f"{'':<14} with the no-comm step as compute ({q['step_compute_s'] * 1e3:.1f} "
                      f"ms): predicted {q['predicted_step_s'] * 1e3:.1f} ms, full overlap "
                      f"{q['full_overlap_step_s'] * 1e3:.1f} ms, error {q['relative_error']:+.1%}")
    write_json(args.json, records, meta=dict(stock_backend=args.stock_backend,
                                             stock_reason=args.stock_reason))
    sys.stdout.flush()
