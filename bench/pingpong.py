#!/usr/bin/env python
"""The smallest all-reduce, back to back: the latency a training loop sees.

    python bench/pingpong.py --bytes 8 --calls 20000 --nproc 2

Each rank calls pycomm.all_reduce on the same tensor `--calls` times, timing
each call on its own; rank 0 prints the median and the 10th/90th percentiles.
Unlike bench/collectives_perf.py, no benchmark closure sits around the call.
"""
import argparse
import statistics
import time

from harness.launch import launch
from harness.sizes import parse_size


def run(args):
    import torch
    import torch.distributed as dist

    import pycomm

    pycomm.init()
    t = torch.zeros(max(args.bytes // 4, 1))
    all_reduce, clock = pycomm.all_reduce, time.perf_counter
    for _ in range(1000):
        all_reduce(t)
    samples = []
    for _ in range(args.calls):
        t0 = clock()
        all_reduce(t)
        samples.append(clock() - t0)
    if dist.get_rank() == 0:
        q = statistics.quantiles(samples, n=10)
        print(f"{t.numel() * 4} B float32 sum, {dist.get_world_size()} ranks, {args.calls} calls: "
              f"median {statistics.median(samples) * 1e6:.2f} us, "
              f"p10 {q[0] * 1e6:.2f} us, p90 {q[-1] * 1e6:.2f} us")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=parse_size, default="8", help="message size (8, 64K, 1M)")
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--nproc", type=int, default=2)
    args = p.parse_args(argv)
    launch(run, args, args.nproc)


if __name__ == "__main__":
    main()
