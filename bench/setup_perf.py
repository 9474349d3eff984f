#!/usr/bin/env python
"""What it costs to set a pycomm group up, 2 ranks: `dist.new_group(backend="cpu:pycomm")`
(the store's rendezvous, the session segment, each rank's segment server, the gloo
fallback), then the group's first point-to-point message (rank 0's channel made, offered
and fetched), then its destruction.

    python bench/setup_perf.py                    # 20 groups, about 20 s here
    python bench/ab_builds.py --before ../old --after . -- bench/setup_perf.py

One torchrun launch; each step is rank 0's median over --groups groups (ms), with the
spread (max - min) / median. The message's value is checked.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from harness.launch import add_rank_job_options  # (harness puts pycomm on sys.path)

STEPS = ("new_group", "first_send", "destroy")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=20)
    p.add_argument("--json", default=None)
    add_rank_job_options(p)
    return p.parse_args(argv)


def rank_job(args) -> None:
    import torch
    import torch.distributed as dist

    import pycomm  # noqa: F401 - the backend
    from harness.launch import rank_job_result
    from harness.timing import summarize

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    samples = {s: [] for s in STEPS}
    wrong = 0
    for i in range(args.groups + 1):  # the first is a warm-up
        dist.barrier()
        t0 = time.perf_counter()
        group = dist.new_group(backend="cpu:pycomm")
        t1 = time.perf_counter()
        x = torch.full((2,), float(i)) if rank == 0 else torch.zeros(2)
        if rank == 0:
            dist.send(x, 1, group=group)
        else:
            dist.recv(x, 0, group=group)
        t2 = time.perf_counter()
        wrong += int(x.tolist() != [float(i)] * 2)
        dist.destroy_process_group(group)
        t3 = time.perf_counter()
        if i:
            for step, dt in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2)):
                samples[step].append(dt)
    rows = []
    for step, s in samples.items():
        med, spread = summarize(s)
        rows.append(dict(call=step, size=2, pycomm_us=med * 1e6, spread=spread))
    rank_job_result(args.out, dict(rows=rows, wrong=wrong, groups=args.groups))
    dist.destroy_process_group()


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.rank_job:
        return rank_job(args)
    from harness.launch import torchrun_rank_job

    result = torchrun_rank_job(__file__, ["--groups", args.groups], 2, 600)
    print(f"# a pycomm group's set-up, 2 ranks: rank 0's median over {args.groups} groups "
          "(spread in brackets)")
    for r in result["rows"]:
        print(f"{r['call']:>11} {r['pycomm_us'] / 1e3:9.2f} ms  ({r['spread']:.0%})")
    if result["wrong"]:
        raise SystemExit(f"setup_perf: {result['wrong']} first messages arrived wrong")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=dict(command=" ".join(sys.argv)), rows=result["rows"]), f, indent=1)


if __name__ == "__main__":
    main()
