#!/usr/bin/env python
"""All-reduce of CPU tensors in PyTorch's symmetric memory against ordinary tensors, on
pycomm, 2 ranks, side by side in turns:

    ordinary   dist.all_reduce(t) on a pycomm group, t an ordinary tensor (copied through
               pycomm's shared memory: the one-shot's slots, or the ring's links)
    symmetric  dist.all_reduce(s), s = symm_mem.empty(...) rendezvoused on the group: pycomm
               reduces it where it lies (each rank its share of every copy, written into
               every copy), no copy in or out
    one_shot   torch.ops.symm_mem.one_shot_all_reduce_out(s, "sum", group, out)
    two_shot   torch.ops.symm_mem.two_shot_all_reduce_(s, "sum", group) (the backend's
               in-place all-reduce, through the op)
    gloo       dist.all_reduce(t) on a gloo group of the same ranks (fewer calls)
    copy       every rank copies its tensor once (dst.copy_(src)): as many bytes as the
               in-place all-reduce of 2 ranks reads and writes. A reference, not a bound:
               the all-reduce's pieces stay in cache between their read and their writes

    python bench/symm_mem_perf.py                        # 8 B to 16 MiB, about 2 min here
    python bench/symm_mem_perf.py --json out.json --reps 9

Per size the roads run in turns, `--reps` times, each a batch of calls; a road's figure is
the slower rank's median per-call time over the reps (µs), with the spread (max - min) /
median. Every road's result is checked after its batch on integer-valued floats: exact.
"""
from __future__ import annotations

import argparse
import time

from harness.launch import add_rank_job_options  # (harness puts pycomm on sys.path)

ROADS = ("ordinary", "symmetric", "one_shot", "two_shot", "gloo", "copy")
SIZES = (8, 512, 4096, 65536, 1 << 20, 16 << 20)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="bytes, comma-separated")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--budget", type=float, default=0.05, help="seconds of calls per road and rep")
    p.add_argument("--json", default=None)
    add_rank_job_options(p)
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    return args


def roads(n, group, gloo):
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    name = group.group_name
    t = torch.zeros(n)
    s = symm_mem.empty(n, device="cpu")
    symm_mem.rendezvous(s, name)
    out = torch.empty(n)
    src, dst = torch.zeros(n), torch.empty(n)
    # road -> (call, the tensor holding its result)
    return {
        "ordinary": (lambda: dist.all_reduce(t, group=group), t),
        "symmetric": (lambda: dist.all_reduce(s, group=group), s),
        "one_shot": (lambda: torch.ops.symm_mem.one_shot_all_reduce_out(s, "sum", name, out), out),
        "two_shot": (lambda: torch.ops.symm_mem.two_shot_all_reduce_(s, "sum", name), s),
        "gloo": (lambda: dist.all_reduce(t, group=gloo), t),
        "copy": (lambda: dst.copy_(src), None),
    }, (t, s)


def rank_job(args) -> None:
    import torch
    import torch.distributed as dist

    import pycomm  # noqa: F401 - the backend and the CPU symmetric memory
    from harness.launch import rank_job_result
    from harness.timing import summarize

    torch.set_num_threads(1)
    dist.init_process_group("cpu:pycomm")
    group = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    rows = []
    for size in args.sizes:
        n = max(1, size // 4)
        fns, inputs = roads(n, group, gloo)
        calls = {}
        for k, (fn, _) in fns.items():  # one timed call each: the batch sizes, agreed
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            est = torch.tensor([time.perf_counter() - t0])
            dist.all_reduce(est, op=dist.ReduceOp.MAX, group=gloo)
            calls[k] = max(3, min(2000, int(args.budget / max(est.item(), 1e-7))))
        samples = {k: [] for k in fns}
        wrong = {k: 0 for k in fns}
        names = list(fns)
        for rep in range(args.reps + 1):  # the first is a warm-up
            # Each rep starts one road later: a road's caches are not always its predecessor's.
            for k in names[rep % len(names):] + names[:rep % len(names)]:
                fn, result = fns[k]
                for x in inputs:
                    x.zero_()  # stays 0 through any number of sums
                dist.barrier(group=gloo)
                t0 = time.perf_counter()
                for _ in range(calls[k]):
                    fn()
                dt = torch.tensor([(time.perf_counter() - t0) / calls[k]])
                dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=gloo)
                if result is not None:
                    for x in inputs:
                        x.fill_(rank + 1)  # integer-valued: an exact sum
                    fn()
                    wrong[k] += int(not bool((result == world * (world + 1) / 2).all()))
                if rep:
                    samples[k].append(dt.item())
        for k, s in samples.items():
            med, spread = summarize(s)
            rows.append(dict(size=size, road=k, us=med * 1e6, spread=spread,
                             calls=calls[k], wrong=wrong[k], rounds_us=[x * 1e6 for x in s]))
        del fns, inputs
    rank_job_result(args.out, rows)
    dist.destroy_process_group()


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.rank_job:
        return rank_job(args)
    from harness import driver
    from harness.launch import torchrun_rank_job
    from harness.sizes import human
    from harness.table import Column, Table

    rows = torchrun_rank_job(__file__, ["--reps", args.reps, "--budget", args.budget,
                                        "--sizes", ",".join(map(str, args.sizes))], 2, 1800)
    us = {(r["size"], r["road"]): r for r in rows}

    def ratio(size, road, over="ordinary"):
        a, b = us.get((size, road)), us.get((size, over))
        return a["us"] / b["us"] if a and b else None

    print(f"# all-reduce (sum, float32) of symmetric-memory tensors on pycomm, 2 ranks: the slower "
          f"rank's median µs per call over {args.reps} reps (spread); x ord: over ordinary's time")
    cols = [Column("size", 8, lambda r: human(r["size"]), align=">")]
    for road in ROADS:
        cols += [Column(f"{road} µs", max(11, len(road) + 4), lambda r, k=road: us[(r["size"], k)]["us"], ".1f"),
                 Column("+-%", 4, lambda r, k=road: us[(r["size"], k)]["spread"], ".0f", 100)]
    cols += [None, Column("sym x ord", 9, lambda r: ratio(r["size"], "symmetric"), ".2f"),
             Column("1sh x ord", 9, lambda r: ratio(r["size"], "one_shot"), ".2f"),
             Column("#wrong", 6, lambda r: sum(us[(r["size"], k)]["wrong"] for k in ROADS), "d")]
    t = Table(cols)
    print(t.header())
    for size in args.sizes:
        print(t.row(dict(size=size)))
    lines = []
    big = max(args.sizes)
    small = [s for s in args.sizes if s <= 65536]
    if (big, "symmetric") in us:
        lines.append(f"{human(big)}: symmetric {ratio(big, 'symmetric'):.2f}x ordinary (target <= 0.7), "
                     f"copy {ratio(big, 'copy'):.2f}x; two_shot op {ratio(big, 'two_shot'):.2f}x, "
                     f"one_shot op {ratio(big, 'one_shot'):.2f}x")
    if small:
        worst = max(small, key=lambda s: ratio(s, "symmetric"))
        lines.append(f"8 B to 64 KiB: symmetric at most {ratio(worst, 'symmetric'):.2f}x ordinary "
                     f"(at {human(worst)}; target: no slower)")
    bad = sum(r["wrong"] for r in rows)
    if bad:
        lines.append(f"WRONG values in {bad} reps")
    driver.report(args, "symm_mem_perf", lines, [dict(kind="symm_road", **r) for r in rows],
                  dict(reps=args.reps, budget_s=args.budget, world_size=2))
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
