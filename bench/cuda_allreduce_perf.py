"""All-reduce of CUDA tensors between rank processes: pycomm's CUDA IPC path
against NCCL and PyTorch's symmetric-memory all-reduces, with the nccl-tests
columns and #wrong.

    python3 bench/cuda_allreduce_perf.py --nproc 2 -b 8 -e 256M -f 4 --json out.json

Ranks are processes; with fewer GPUs than ranks they share them (rank r on
cuda:r % count). Processes on one GPU take turns on it unless MPS runs, so
their times there say little about the kernels (bench/gpu_check.sh times the
kernels with ranks as threads of one process); the values are checked either
way. NCCL runs several ranks on one GPU only from 2.30 on, with
NCCL_MULTI_RANK_GPU_ENABLE=1 (bench/harness/peers/nccl.py: set where it helps,
else the column says why), and symmetric memory only with
TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1 (set here); every peer is probed once on
every rank, and where one cannot run, its column says why.

Each size is checked once per peer on the harness's integer-valued pattern (float32 sum),
then timed: the median of --iters single calls, each timed with CUDA events. --json writes
{"meta": {"world", "gpus", "nccl", ...}, "rows": [...]} (pycomm.tools.results_schema).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

from harness.checks import count_wrong, fill
from harness.collectives import COLLECTIVES
from harness.launch import launch
from harness.peers import nccl, symm_mem
from harness.peers import pycomm as pycomm_peers
from harness.sizes import add_size_options, check_size_options, sweep
from harness.table import Column, Table
from harness.timing import sample
from harness.world import World, why
from pycomm.tools import results_schema as schema

ALL_REDUCE = COLLECTIVES["all_reduce"]


def sizes(args):
    return sweep(args.minbytes, args.maxbytes, args.stepfactor, step=4)


def candidates(world):
    """Each peer: name -> (prepare, why not). prepare(t) returns a call that all-reduces
    t's values and returns the tensor holding the result."""
    out = pycomm_peers.cuda_candidates()
    out["nccl"] = nccl.cuda_candidate(world)
    out.update(symm_mem.cuda_candidates(world))
    return out


def measure(world, args, prepare, count):
    """(wrong, [seconds per call]) of one peer at one size."""
    torch, n = world.torch, world.size
    t = torch.empty(count, device=world.device)
    fill(t, lambda idx: ALL_REDUCE.input_values(world.rank, idx, n, "sum"))
    call = prepare(t)
    got = call()  # checked once: later calls reduce what is there again
    torch.cuda.synchronize()
    wrong = count_wrong(got, lambda idx: ALL_REDUCE.expected(world.rank, idx, n, count, "sum",
                                                             torch))
    for _ in range(args.warmup):
        call()
    torch.cuda.synchronize()
    return wrong, sample(call, args.iters, world.clock)


def run(args):
    world = World("cuda")
    peers = candidates(world)
    rows = []
    for nbytes in sizes(args):
        count = max(nbytes // 4, 1)
        for name, (prepare, why_not) in peers.items():
            row = dict(name=name, bytes=count * 4, count=count, world=world.size, why=why_not)
            rows.append(row)
            if prepare is None:
                continue
            try:
                wrong, times = measure(world, args, prepare, count)
                row.update(us=statistics.median(times) * 1e6, us_min=min(times) * 1e6,
                           us_max=max(times) * 1e6, wrong=wrong)
            except Exception as e:  # noqa: BLE001 - one failing column does not end the sweep
                row["why"] = why(e, 100)
    if world.rank == 0:
        report(rows, world.size, args)
        if args.json:
            torch = world.torch
            schema.write(args.json, rows, dict(world=world.size, gpus=torch.cuda.device_count(),
                                               nccl=nccl.version_text(nccl.nccl_version())))


def _algbw(r):
    return r["bytes"] / r["us"] / 1e3 if "us" in r else None


def _busbw(factor):
    return lambda r: None if "us" not in r else _algbw(r) * factor


def report(rows, world, args):
    import torch

    gpus = torch.cuda.device_count()
    print(f"# all_reduce, float32 sum, {world} rank processes on {gpus} GPU(s) "
          f"({torch.cuda.get_device_name(0)}); median of {args.iters} calls, CUDA events")
    if world > gpus:
        print("# ranks share a GPU: without MPS their kernels take turns, so times are an upper "
              "bound on the collective, not the kernel's speed")
    factor = ALL_REDUCE.busbw_factor(world)
    table = Table([Column("size", 10, "bytes", "d"), Column("count", 10, "count", "d"),
                   Column("peer", 14, "name", align="<"), Column("time us", 9, "us", ".1f"),
                   Column("algbw", 7, _algbw, ".2f"),
                   Column("busbw", 7, _busbw(factor), ".2f"),
                   Column("#wrong", 6, "wrong", "d")])
    print(table.header())
    for r in rows:
        print(table.row(r, note=None if "us" in r else f"({r['why']})"))
    sys.stdout.flush()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_options(p, " (<= 1: add 4 bytes)")
    p.add_argument("--nproc", type=int, default=2, help="rank processes (ignored under torchrun)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per size and peer")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls before them")
    p.add_argument("--json", metavar="PATH", help="write the rows here")
    args = p.parse_args(argv)
    check_size_options(p, args)
    if args.nproc < 1 or args.iters < 1 or args.warmup < 0:
        p.error("--nproc and --iters must be >= 1, --warmup >= 0")
    return args


# What a run imports beyond torch and pycomm (bench/dry_run.py checks it).
DRY_RUN_NEEDS = ("torch.distributed._symmetric_memory", "harness.peers.nccl")


def plan(args):
    """What a run would do (bench/dry_run.py prints it)."""
    all_sizes = sizes(args)
    return dict(ranks=args.nproc,
                sizes=f"{len(all_sizes)} from {all_sizes[0]} to {all_sizes[-1]} B",
                peers=", ".join([f"pycomm {a}" for a in pycomm_peers.CUDA_ALGORITHMS]
                                + ["nccl", "symm one/two_shot"]),
                calls=f"{1 + args.warmup + args.iters} per size and peer",
                nccl=f"{nccl.version_text(nccl.nccl_version())} here (ranks sharing a GPU need "
                     f"{nccl.version_text(nccl.SHARED_GPU_NCCL)}+)")


def main(argv=None):
    args = parse_args(argv)
    # Symmetric memory refuses ranks that share a GPU unless told otherwise; NCCL's
    # variable is set by harness.peers.nccl where its version allows it.
    os.environ.setdefault(symm_mem.ALLOW_SHARED_GPU_ENV, "1")
    launch(run, args, args.nproc, backend="cpu:gloo,cuda:gloo")


if __name__ == "__main__":
    main()
