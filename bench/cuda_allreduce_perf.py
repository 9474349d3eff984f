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

--peers picks the kinds of peer (floor, pycomm, nccl, symm); they run in that order, each
set up only when its first turn comes, so that pycomm's columns are measured before a probe
of another kind can hang (symmetric memory's waits have no bound of ours) or trap (which
poisons the CUDA context for whatever follows in the process). bench/gpu_check.sh runs
symm in a process of its own.

The floor is a device-to-device copy of the same bytes on each rank (no all-reduce
moves less), timed as the peers are and not checked. Each size is checked once per peer
and round on the harness's integer-valued pattern (float32 sum), then timed: the median of
--iters single calls, each timed with CUDA events. --rounds R sweeps every peer R times in
turns (each set up at its first turn); a size's time is then the median of its rounds'
medians, us_rounds their spread. Rank 0 prints the last round's rows as they come, and
--json rewrites {"meta": {"world", "gpus", "nccl", ...}, "rows": [...]}
(pycomm.tools.results_schema) after each size, so a run cut short keeps them.
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


# The kinds of peer, in the order they run: the copy floor, then pycomm's own columns.
PEERS = ("floor", "pycomm", "nccl", "symm")
# Each kind's columns, as a dry run's plan names them.
PLAN_PEERS = dict(floor="copy floor", nccl="nccl", symm="symm one/two_shot",
                  pycomm=", ".join(f"pycomm {a}" for a in pycomm_peers.CUDA_ALGORITHMS))
FLOOR = "copy floor"


def candidates(world, kind):
    """The peers of one kind: name -> (prepare, why not). prepare(t) returns a call that
    all-reduces t's values and returns the tensor holding the result."""
    if kind == "floor":
        def prepare(t):
            out = world.torch.empty_like(t)
            return lambda: out.copy_(t)

        return {FLOOR: (prepare, None)}
    if kind == "pycomm":
        return pycomm_peers.cuda_candidates()
    if kind == "nccl":
        return {"nccl": nccl.cuda_candidate(world)}
    return symm_mem.cuda_candidates(world)


def measure(world, args, prepare, count, check=True):
    """(wrong, [seconds per call]) of one peer at one size (wrong: None unchecked)."""
    torch, n = world.torch, world.size
    t = torch.empty(count, device=world.device)
    fill(t, lambda idx: ALL_REDUCE.input_values(world.rank, idx, n, "sum"))
    call = prepare(t)
    got = call()  # checked once: later calls reduce what is there again
    torch.cuda.synchronize()
    wrong = count_wrong(got, lambda idx: ALL_REDUCE.expected(world.rank, idx, n, count, "sum",
                                                             torch)) if check else None
    for _ in range(args.warmup):
        call()
    torch.cuda.synchronize()
    return wrong, sample(call, args.iters, world.clock)


def run(args):
    world = World("cuda")
    torch = world.torch
    rows = {}  # (name, count) -> row, in the order first measured
    meta = dict(world=world.size, gpus=torch.cuda.device_count(), nccl=nccl.which_text(),
                peers=",".join(args.peers), rounds=args.rounds)
    table = make_table(world.size)
    if world.rank == 0:
        print_header(table, world.size, args)
    kinds = {}
    for turn in range(args.rounds):
        for kind in args.peers:
            if kind not in kinds:  # set up when its first turn comes
                kinds[kind] = candidates(world, kind)
            peers = kinds[kind]
            for nbytes in sizes(args):
                count = max(nbytes // 4, 1)
                for name, (prepare, why_not) in peers.items():
                    row = rows.setdefault((name, count), dict(
                        name=name, bytes=count * 4, count=count, world=world.size, why=why_not))
                    if prepare is None:
                        continue
                    try:
                        wrong, times = measure(world, args, prepare, count, check=kind != "floor")
                        add_round(row, wrong, times)
                    except Exception as e:  # noqa: BLE001 - one failing column does not end the sweep
                        row["why"] = why(e, 100)
                if world.rank == 0:
                    if turn == args.rounds - 1:
                        for name in peers:
                            row = rows[(name, count)]
                            print(table.row(row, note=None if "us" in row else f"({row['why']})"))
                        sys.stdout.flush()
                    if args.json:
                        schema.write(args.json, list(rows.values()), meta)


def add_round(row, wrong, times):
    """One round's sample into a row: its time is the median of the rounds' medians, with
    each round's median (us_rounds: their spread) and the fastest and slowest single call."""
    rounds = row.setdefault("us_rounds", [])
    rounds.append(statistics.median(times) * 1e6)
    row.update(us=statistics.median(rounds), us_min=min(row.get("us_min", 1e30), min(times) * 1e6),
               us_max=max(row.get("us_max", 0.0), max(times) * 1e6))
    if wrong is not None:
        row["wrong"] = row.get("wrong", 0) + wrong


def _algbw(r):
    return r["bytes"] / r["us"] / 1e3 if "us" in r else None


def _busbw(factor):
    return lambda r: None if "us" not in r else _algbw(r) * factor


def make_table(world):
    factor = ALL_REDUCE.busbw_factor(world)
    return Table([Column("size", 10, "bytes", "d"), Column("count", 10, "count", "d"),
                  Column("peer", 14, "name", align="<"), Column("time us", 9, "us", ".1f"),
                  Column("algbw", 7, _algbw, ".2f"),
                  Column("busbw", 7, _busbw(factor), ".2f"),
                  Column("#wrong", 6, "wrong", "d")])


def print_header(table, world, args):
    import torch

    gpus = torch.cuda.device_count()
    print(f"# all_reduce, float32 sum, {world} rank processes on {gpus} GPU(s) "
          f"({torch.cuda.get_device_name(0)}); median of {args.iters} calls, CUDA events; "
          f"peers: {', '.join(args.peers)}")
    if world > gpus:
        print("# ranks share a GPU: without MPS their kernels take turns, so times are an upper "
              "bound on the collective, not the kernel's speed")
    print(table.header())
    sys.stdout.flush()


def _peer_kinds(text):
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in PEERS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(PEERS)}, "
                                         f"got {text!r}")
    return [k for k in PEERS if k in kinds]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_options(p, " (<= 1: add 4 bytes)")
    p.add_argument("--nproc", type=int, default=2, help="rank processes (ignored under torchrun)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per size and peer")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls before them")
    p.add_argument("--rounds", type=int, default=1,
                   help="sweeps of every peer in turns (a size's time: the median of its "
                        "rounds' medians; default 1)")
    p.add_argument("--peers", type=_peer_kinds, default=list(PEERS), metavar="KINDS",
                   help=f"comma list of {', '.join(PEERS)} (run in that order; default: all)")
    p.add_argument("--json", metavar="PATH", help="write the rows here, after each size")
    args = p.parse_args(argv)
    check_size_options(p, args)
    if args.nproc < 1 or args.iters < 1 or args.rounds < 1 or args.warmup < 0:
        p.error("--nproc, --iters and --rounds must be >= 1, --warmup >= 0")
    return args


# What a run imports beyond torch and pycomm (bench/dry_run.py checks it).
DRY_RUN_NEEDS = ("torch.distributed._symmetric_memory", "harness.peers.nccl")


def plan(args):
    """What a run would do (bench/dry_run.py prints it)."""
    all_sizes = sizes(args)
    return dict(ranks=args.nproc,
                sizes=f"{len(all_sizes)} from {all_sizes[0]} to {all_sizes[-1]} B",
                peers=", ".join(PLAN_PEERS[k] for k in args.peers),
                calls=f"{1 + args.warmup + args.iters} per size and peer in each of "
                      f"{args.rounds} round(s), the peers in turns",
                nccl=f"{nccl.which_text()} here (ranks sharing a GPU need "
                     f"{nccl.version_text(nccl.SHARED_GPU_NCCL)}+)")


def main(argv=None):
    args = parse_args(argv)
    # Symmetric memory refuses ranks that share a GPU unless told otherwise; NCCL's
    # variable is set by harness.peers.nccl where its version allows it.
    os.environ.setdefault(symm_mem.ALLOW_SHARED_GPU_ENV, "1")
    nccl.use_carried()  # the ranks load bench/gpu/build_nccl.sh's NCCL, where it was built
    launch(run, args, args.nproc, backend="cpu:gloo,cuda:gloo")


if __name__ == "__main__":
    main()
