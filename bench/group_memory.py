#!/usr/bin/env python
"""What one pycomm group maps, by world size, measured in its ranks: after set-up, after a
ring of sends, and after every collective; and whether every collective gave the right
values on every rank. Ranks beyond the cores are oversubscribed: this checks correctness
and memory, not speed.

    python bench/group_memory.py                   # W = 2, 4, 8, 16, 32 (about 3 min here)
    python bench/group_memory.py --worlds 2,4 --json out.json

Each world size is one `torchrun --nproc-per-node W` launch of this file (--rank-job): the
ranks start on gloo, make a `cpu:pycomm` group and read, from /proc/self/maps, the bytes of
their mappings of pycomm's segments (memfd:pycomm-* or /dev/shm/pycomm-*, whichever
transport the group took), before and after each step. The predicted figures come from
`pycomm._C.shared_memory_cost` (the numbers `pycomm doctor` prints).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from harness.launch import add_rank_job_options  # (harness puts pycomm on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def every_collective(group, rank: int, world: int) -> list:
    """Runs each collective on integer-valued floats and returns the names of those whose
    values were wrong (exact: sums of small integers are exact in float32)."""
    import torch
    import torch.distributed as dist

    wrong = []

    def check(name, ok):
        if not ok:
            wrong.append(name)

    n = 1000
    mine = torch.full((n,), float(rank + 1))
    total = world * (world + 1) / 2
    t = mine.clone()
    dist.all_reduce(t, group=group)
    check("all_reduce", bool((t == total).all()))
    big = torch.full((1 << 20,), float(rank + 1))  # 4 MiB: the ring, in pieces
    dist.all_reduce(big, group=group)
    check("all_reduce 4 MiB", bool((big == total).all()))
    t = mine.clone() if rank == 0 else torch.zeros(n)
    dist.broadcast(t, 0, group=group)
    check("broadcast", bool((t == 1).all()))
    t = mine.clone()
    dist.reduce(t, 0, group=group)
    check("reduce", rank != 0 or bool((t == total).all()))
    outs = [torch.zeros(n) for _ in range(world)]
    dist.all_gather(outs, mine, group=group)
    check("all_gather", all(bool((o == r + 1).all()) for r, o in enumerate(outs)))
    gathered = [torch.zeros(n) for _ in range(world)] if rank == 0 else None
    dist.gather(mine, gathered, 0, group=group)
    check("gather", rank != 0 or all(bool((o == r + 1).all()) for r, o in enumerate(gathered)))
    t = torch.zeros(n)
    dist.scatter(t, [torch.full((n,), float(r)) for r in range(world)] if rank == 0 else None, 0,
                 group=group)
    check("scatter", bool((t == rank).all()))
    t = torch.zeros(n)
    dist.reduce_scatter(t, [torch.full((n,), float(rank + r)) for r in range(world)], group=group)
    check("reduce_scatter", bool((t == total - world + rank * world).all()))
    send = torch.arange(world * 4, dtype=torch.float32) + 100 * rank
    recv = torch.zeros(world * 4)
    dist.all_to_all_single(recv, send, group=group)
    expect = torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) + 100 * r
                        for r in range(world)])
    check("all_to_all_single", bool((recv == expect).all()))
    dist.barrier(group=group)
    return wrong


def rank_job(args) -> None:
    import torch
    import torch.distributed as dist

    import pycomm  # noqa: F401  (registers the backend)
    from harness.launch import rank_job_result
    from pycomm import _C, config
    from pycomm.tools.doctor import mapped_segment_bytes

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    base = mapped_segment_bytes()
    group = dist.new_group(backend="cpu:pycomm")
    dist.barrier(group=group)
    set_up = mapped_segment_bytes() - base
    # A ring of sends: each rank makes one channel (to the next) and takes one.
    got = torch.zeros(4096)
    [w.wait() for w in (dist.isend(torch.full((4096,), float(rank)), (rank + 1) % world, group=group),
                        dist.irecv(got, (rank - 1) % world, group=group))]
    ring_ok = bool((got == (rank - 1) % world).all())
    ring = mapped_segment_bytes() - base
    wrong = every_collective(group, rank, world)
    after_all = mapped_segment_bytes() - base
    cost = _C.shared_memory_cost(world, config.communicator_config(world, 60.0))
    mine = {"rank": rank, "set_up": set_up, "ring": ring, "after_all": after_all,
            "wrong": wrong + ([] if ring_ok else ["ring of sends"]), **cost}
    dist.destroy_process_group(group)
    # Every rank's figures to rank 0, over gloo: the pycomm group is gone, so this costs its
    # figures nothing.
    ranks = [None] * world
    dist.all_gather_object(ranks, mine)
    rank_job_result(args.out, ranks)
    dist.destroy_process_group()


def measure(world: int, timeout_s: float) -> dict:
    from harness.launch import torchrun_rank_job

    ranks = torchrun_rank_job(__file__, [], world, timeout_s,
                              what=f"group_memory: the launch of {world} ranks")
    one = ranks[0]
    return {
        "world": world,
        "session_bytes": one["session_bytes"],
        "channel_bytes": one["channel_bytes"],
        # Every rank maps the same session; the channels differ by who talked to whom.
        "set_up": sorted({r["set_up"] for r in ranks}),
        "ring": sorted({r["ring"] for r in ranks}),
        "after_all": sorted({r["after_all"] for r in ranks}),
        "wrong": sorted({w for r in ranks for w in r["wrong"]}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="2,4,8,16,32")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per world size")
    ap.add_argument("--json", default=os.path.join(HERE, "out", "group_memory.json"))
    add_rank_job_options(ap)
    args = ap.parse_args()
    if args.rank_job:
        return rank_job(args)
    rows = [measure(int(w), args.timeout) for w in args.worlds.split(",")]
    print(f"{'ranks':>5} {'mapped a rank after set-up':>27} {'after a ring of sends':>22} "
          f"{'after every collective':>23}  values")
    for r in rows:
        mib = lambda xs: "/".join(f"{x / MIB:.2f}" for x in xs)  # noqa: E731
        print(f"{r['world']:>5} {mib(r['set_up']) + ' MiB':>27} {mib(r['ring']) + ' MiB':>22} "
              f"{mib(r['after_all']) + ' MiB':>23}  "
              + ("right" if not r["wrong"] else "WRONG: " + ", ".join(r["wrong"])))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    print(f"wrote {args.json}")
    if any(r["wrong"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
