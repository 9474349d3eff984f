#!/usr/bin/env python
"""All-reduce sweep in the style of nccl-tests: pycomm beside the stock backend.

    python bench/allreduce_perf.py -b 8 -e 256M -f 2 --nproc 2 --json out.json

For each size it prints, from rank 0, pycomm's and gloo's time (median of many
calls, each timed on its own), algbw = size/time, busbw = algbw * 2(n-1)/n,
#wrong (elements that differ from the exact answer in a separate check), the
ratio of their times, and a memory ceiling measured in the same run: the time
for every rank at once to memcpy its S bytes twice. `of_ceiling` is
ceiling time / pycomm time (1.0 = as fast as two plain copies). The last two
columns time pycomm without its restore-on-failure copy (PYCOMM_RESTORE_ON_FAILURE=0),
to show what that guarantee costs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_launch import launch  # noqa: E402

DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64")
OPS = ("sum", "avg", "max", "min", "product")


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def sizes(begin: int, end: int, factor: float):
    out, s = [], begin
    while s <= end:
        out.append(s)
        s = int(s * factor) if factor > 1 else s + 1
    return out


def time_calls(fn, min_time_s: float, min_iters: int, max_iters: int, warmup: int):
    """Median seconds per call. The number of calls is fixed by rank 0's first
    estimate and shared, so that every rank makes the same calls."""
    import torch
    import torch.distributed as dist

    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    n = torch.tensor([min(max_iters, max(min_iters, int(min_time_s / max(first, 1e-7))))])
    dist.broadcast(n, 0)
    samples = []
    for _ in range(int(n.item())):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def check_wrong(all_reduce, count, dtype, op, world):
    """Elements that differ from the exact result for integer-valued inputs."""
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    idx = torch.arange(count, dtype=torch.int64)
    if op == "product":
        base = lambda r: ((idx + r) % 2 + 1)  # noqa: E731
    else:
        base = lambda r: ((idx * 7 + r * 13) % 5)  # noqa: E731
    x = base(rank).to(dtype)
    want = base(0).to(torch.float64)
    for r in range(1, world):
        v = base(r).to(torch.float64)
        want = {"sum": want + v, "avg": want + v, "product": want * v,
                "max": torch.maximum(want, v), "min": torch.minimum(want, v)}[op]
    if op == "avg":
        want = want / world
    all_reduce(x)
    return int((x.to(torch.float64) != want.to(dtype).to(torch.float64)).sum().item())


def run(args):
    import torch
    import torch.distributed as dist

    import pycomm

    rank, world = dist.get_rank(), dist.get_world_size()
    comm = pycomm.init()
    # The same collective without the restore-on-failure copy (see README,
    # Failure behaviour), to show what that guarantee costs.
    os.environ["PYCOMM_RESTORE_ON_FAILURE"] = "0"
    fast = pycomm.Communicator()
    del os.environ["PYCOMM_RESTORE_ON_FAILURE"]
    dtype = getattr(torch, args.dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    stock_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
                "product": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.SUM}[args.op]
    stock_backend = dist.get_backend()
    rows = []
    header = (f"{'size':>10} {'count':>10} {'type':>8} {'redop':>7} | {'pycomm us':>10} "
              f"{'algbw':>7} {'busbw':>7} {'#wrong':>6} | {stock_backend + ' us':>10} {'busbw':>7} "
              f"{'#wrong':>6} | {'speedup':>7} | {'2xcopy us':>10} {'of_ceiling':>10} | "
              f"{'norestore us':>12} {'of_ceiling':>10}")
    if rank == 0:
        print(f"# pycomm all_reduce vs {stock_backend}: {world} ranks, {args.dtype}, op={args.op}, "
              f"algorithm={args.algorithm}; times are medians; busbw in GB/s")
        print(header)
    # Warm every path up once (page faults, lazy initialisation, CPU clocks)
    # so that the first row is not charged for it.
    warm = torch.zeros(1024, dtype=dtype)
    for _ in range(2000):
        pycomm.all_reduce(warm, op=args.op, algorithm=args.algorithm)
    for size in sizes(args.minbytes, args.maxbytes, args.stepfactor):
        count = max(size // esize, 0)
        nbytes = count * esize
        x = torch.zeros(count, dtype=dtype)
        src = torch.ones(count, dtype=dtype)
        dst = torch.empty_like(src)
        budget = dict(min_time_s=args.min_time / args.rounds, min_iters=args.min_iters,
                      max_iters=args.max_iters, warmup=args.warmup)

        def ours(t=x):
            pycomm.all_reduce(t, op=args.op, algorithm=args.algorithm)

        def ours_fast(t=x):
            fast.all_reduce(t, op=args.op, algorithm=args.algorithm)

        def stock(t=x):
            dist.all_reduce(t, op=stock_op)

        def two_copies(src=src, dst=dst):
            # The ceiling: every rank copies its bytes twice, all at once.
            comm.barrier()
            t0 = time.perf_counter()
            dst.copy_(src)
            src.copy_(dst)
            return time.perf_counter() - t0

        def ceiling():
            for _ in range(args.warmup):
                two_copies()
            return statistics.median(two_copies() for _ in range(max(args.min_iters, 20)))

        # The three are timed in turns, `rounds` times, and each reported time is
        # the median of its rounds: a shared machine's slow spells then touch all
        # three alike instead of one column.
        t_ours_r, t_fast_r, t_stock_r, t_ceiling_r = [], [], [], []
        for _ in range(args.rounds):
            t_ours_r.append(time_calls(ours, **budget))
            t_fast_r.append(time_calls(ours_fast, **budget))
            if not args.no_stock:
                t_stock_r.append(time_calls(stock, **budget))
            t_ceiling_r.append(ceiling())
        t_ours = statistics.median(t_ours_r)
        t_fast = statistics.median(t_fast_r)
        t_stock = statistics.median(t_stock_r) if t_stock_r else None
        t_ceiling = statistics.median(t_ceiling_r)
        wrong = check_wrong(lambda t: pycomm.all_reduce(t, op=args.op, algorithm=args.algorithm),
                            count, dtype, args.op, world)
        stock_wrong = None
        if not args.no_stock and args.op != "avg":
            stock_wrong = check_wrong(lambda t: dist.all_reduce(t, op=stock_op), count, dtype,
                                      args.op, world)
        del src, dst, x

        bus = 2 * (world - 1) / world if world > 1 else 1.0
        algbw = nbytes / t_ours / 1e9
        row = dict(size=nbytes, count=count, dtype=args.dtype, op=args.op, world_size=world,
                   algorithm=args.algorithm, pycomm_us=t_ours * 1e6, pycomm_algbw=algbw,
                   pycomm_busbw=algbw * bus, wrong=wrong, stock_backend=stock_backend,
                   stock_us=None if t_stock is None else t_stock * 1e6,
                   stock_busbw=None if t_stock is None else nbytes / t_stock / 1e9 * bus,
                   stock_wrong=stock_wrong,
                   speedup=None if t_stock is None else t_stock / t_ours,
                   ceiling_us=t_ceiling * 1e6, frac_of_ceiling=t_ceiling / t_ours,
                   no_restore_us=t_fast * 1e6, no_restore_frac_of_ceiling=t_ceiling / t_fast)
        rows.append(row)
        if rank == 0:
            def f(v, fmt):
                return format(v, fmt) if v is not None else "-"
            print(f"{nbytes:>10} {count:>10} {args.dtype:>8} {args.op:>7} | {t_ours * 1e6:>10.2f} "
                  f"{algbw:>7.2f} {algbw * bus:>7.2f} {wrong:>6} | "
                  f"{f(row['stock_us'], '>10.1f')} {f(row['stock_busbw'], '>7.2f')} "
                  f"{f(stock_wrong, '>6')} | {f(row['speedup'], '>7.1f')} | "
                  f"{t_ceiling * 1e6:>10.1f} {row['frac_of_ceiling']:>10.2f} | "
                  f"{t_fast * 1e6:>12.2f} {row['no_restore_frac_of_ceiling']:>10.2f}", flush=True)
    fast.close()
    if rank == 0:
        total_wrong = sum(r["wrong"] for r in rows)
        print(f"# pycomm #wrong total: {total_wrong}")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(rows, fh, indent=1)
            print(f"# wrote {args.json}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("8"))
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("256M"))
    p.add_argument("-f", "--stepfactor", type=float, default=4.0)
    p.add_argument("--nproc", type=int, default=2, help="ranks to spawn (ignored under torchrun)")
    p.add_argument("-d", "--dtype", choices=DTYPES, default="float32")
    p.add_argument("-o", "--op", choices=OPS, default="sum")
    p.add_argument("--algorithm", default="auto", help="auto | ring | direct")
    p.add_argument("--min-time", type=float, default=0.3,
                   help="seconds of calls per size and backend, over all rounds")
    p.add_argument("--rounds", type=int, default=3, help="times each column is measured, in turns")
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=20000)
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--no-stock", action="store_true", help="skip the stock backend")
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args(argv)
    if args.minbytes > args.maxbytes:
        p.error("-b must not exceed -e")
    return args


def main(argv=None):
    args = parse_args(argv)
    launch(run, args, args.nproc)


if __name__ == "__main__":
    main()
