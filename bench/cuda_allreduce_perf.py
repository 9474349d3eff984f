"""All-reduce of CUDA tensors between rank processes: pycomm's CUDA IPC path
against NCCL and PyTorch's symmetric-memory all-reduces, with the nccl-tests
columns and #wrong.

    python3 bench/cuda_allreduce_perf.py --nproc 2 -b 8 -e 256M -f 4 --json out.json

Ranks are processes; with fewer GPUs than ranks they share them (rank r on
cuda:r % count). Processes on one GPU take turns on it unless MPS runs, so
their times there say little about the kernels (bench/gpu_check.sh times the
kernels with ranks as threads of one process); the values are checked either
way. NCCL runs several ranks on one GPU only from 2.30 on, with
NCCL_MULTI_RANK_GPU_ENABLE=1 (bench/nccl_one_gpu.py: set where it helps, else the
column says why), and symmetric memory only with
TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1 (set here); every peer is probed once on
every rank, and where one cannot run, its column says why.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from bench_launch import launch
from nccl_one_gpu import nccl_version, prepare_nccl, version_text

ALGORITHMS = ("auto", "direct", "two_shot", "ring")


def parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def sizes(args):
    s = args.minbytes
    while s <= args.maxbytes:
        yield s
        s = max(s + 4, int(s * args.stepfactor))


def _time_us(torch, fn, iters):
    """Median of `iters` single calls, each timed with CUDA events."""
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times), min(times), max(times)


def _why(e: BaseException) -> str:
    """An exception in one line, for a column's reason."""
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:100]}"


def _on_every_rank(torch, dist, name, setup):
    """(setup()'s value, None) when it succeeded on every rank, else (None, why not): every
    rank must make the same choice, or their collectives would not match."""
    try:
        value, why = setup(), None
    except Exception as e:  # noqa: BLE001 - reported as the column's reason
        value, why = None, _why(e)
    ok = torch.tensor([0 if why else 1])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # a CPU tensor: the default group's gloo
    if not ok.item():
        return None, why or f"{name} failed on another rank"
    return value, None


def _peers(torch, dist, dev, world):
    """Each candidate: name -> (prepare, why not). prepare(t) returns a call
    that all-reduces t's values and returns the tensor holding the result."""
    import pycomm

    out = {}
    for algo in ALGORITHMS:
        out[f"pycomm {algo}"] = (
            lambda t, a=algo: (lambda: (pycomm.all_reduce(t, algorithm=a), t)[1]), None)

    refused = prepare_nccl(world, torch.cuda.device_count())
    if refused:
        out["nccl"] = (None, refused)
    else:
        def nccl_setup():
            group = dist.new_group(backend="nccl")
            dist.all_reduce(torch.ones(4, device=dev), group=group)
            torch.cuda.synchronize()
            return group

        nccl, why = _on_every_rank(torch, dist, "nccl", nccl_setup)
        out["nccl"] = (None, why) if nccl is None else (
            lambda t: (lambda: (dist.all_reduce(t, group=nccl), t)[1]), None)

    def symm_setup():
        import torch.distributed._symmetric_memory as symm_mem

        group_name = dist.group.WORLD.group_name
        symm_mem.enable_symm_mem_for_group(group_name)
        probe = symm_mem.empty(4, dtype=torch.float32, device=dev)
        symm_mem.rendezvous(probe, group_name)
        probe.fill_(1.0)
        got = torch.ops.symm_mem.one_shot_all_reduce(probe, "sum", group_name)
        torch.cuda.synchronize()
        if not bool((got == world).all()):
            raise RuntimeError(f"a one-shot probe summed to {got.tolist()}, not {world}")
        return symm_mem, group_name

    symm, why = _on_every_rank(torch, dist, "symmetric memory", symm_setup)
    if symm is None:
        out["symm one_shot"] = out["symm two_shot"] = (None, why)
        return out
    symm_mem, group_name = symm

    def symm_op(op_name):
        def prepare(t):
            buf = symm_mem.empty(t.numel(), dtype=t.dtype, device=dev)
            symm_mem.rendezvous(buf, group_name)
            buf.copy_(t)
            op = getattr(torch.ops.symm_mem, op_name)
            # one_shot returns a new tensor; two_shot_ reduces buf in place.
            return lambda: op(buf, "sum", group_name)
        return prepare

    out["symm one_shot"] = (symm_op("one_shot_all_reduce"), None)
    out["symm two_shot"] = (symm_op("two_shot_all_reduce_"), None)
    return out


def run(args):
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    peers = _peers(torch, dist, dev, world)
    rows = []
    for nbytes in sizes(args):
        count = max(nbytes // 4, 1)
        expect = float(world * (world + 1) // 2)
        for name, (prepare, why) in peers.items():
            row = dict(name=name, bytes=count * 4, count=count, world=world, why=why)
            if prepare is None:
                rows.append(row)
                continue
            try:
                t = torch.full((count,), float(rank + 1), device=dev)
                call = prepare(t)
                got = call()  # checked once: later calls reduce what is there again
                torch.cuda.synchronize()
                wrong = int((got != expect).sum().item())
                for _ in range(args.warmup):
                    call()
                torch.cuda.synchronize()
                med, lo, hi = _time_us(torch, call, args.iters)
                row.update(us=med, us_min=lo, us_max=hi, wrong=wrong)
            except Exception as e:  # noqa: BLE001 - one failing column does not end the sweep
                row["why"] = _why(e)
            rows.append(row)
    if rank == 0:
        report(rows, world, args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(world=world, gpus=torch.cuda.device_count(),
                               nccl=version_text(nccl_version()), rows=rows), f, indent=1)


def report(rows, world, args):
    import torch

    gpus = torch.cuda.device_count()
    print(f"# all_reduce, float32 sum, {world} rank processes on {gpus} GPU(s) "
          f"({torch.cuda.get_device_name(0)}); median of {args.iters} calls, CUDA events")
    if world > gpus:
        print("# ranks share a GPU: without MPS their kernels take turns, so times are an upper "
              "bound on the collective, not the kernel's speed")
    print(f"{'size':>10} {'count':>10} {'peer':<14} {'time us':>9} {'algbw':>7} {'busbw':>7} "
          f"{'#wrong':>6}")
    for r in rows:
        if "us" not in r:
            print(f"{r['bytes']:>10} {r['count']:>10} {r['name']:<14} {'-':>9} {'-':>7} {'-':>7} "
                  f"{'-':>6}  ({r['why']})")
            continue
        algbw = r["bytes"] / r["us"] / 1e3
        busbw = algbw * 2 * (world - 1) / world
        print(f"{r['bytes']:>10} {r['count']:>10} {r['name']:<14} {r['us']:>9.1f} {algbw:>7.2f} "
              f"{busbw:>7.2f} {r['wrong']:>6}")
    sys.stdout.flush()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-b", "--minbytes", type=parse_size, default="8", help="smallest size (8, 64K, 1M)")
    p.add_argument("-e", "--maxbytes", type=parse_size, default="256M", help="largest size")
    p.add_argument("-f", "--stepfactor", type=float, default=4.0, help="size multiplier")
    p.add_argument("--nproc", type=int, default=2, help="rank processes (ignored under torchrun)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per size and peer")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls before them")
    p.add_argument("--json", metavar="PATH", help="write the rows here")
    args = p.parse_args(argv)
    if args.minbytes < 1 or args.minbytes > args.maxbytes:
        p.error("-b must be >= 1 and must not exceed -e")
    if args.nproc < 1 or args.iters < 1 or args.warmup < 0:
        p.error("--nproc and --iters must be >= 1, --warmup >= 0")
    return args


# What a run imports beyond torch and pycomm (bench/dry_run.py checks it).
DRY_RUN_NEEDS = ("torch.distributed._symmetric_memory", "nccl_one_gpu")


def plan(args):
    """What a run would do (bench/dry_run.py prints it)."""
    from nccl_one_gpu import SHARED_GPU_NCCL

    all_sizes = list(sizes(args))
    return dict(ranks=args.nproc, sizes=f"{len(all_sizes)} from {all_sizes[0]} to {all_sizes[-1]} B",
                peers=", ".join([f"pycomm {a}" for a in ALGORITHMS] + ["nccl", "symm one/two_shot"]),
                calls=f"{1 + args.warmup + args.iters} per size and peer",
                nccl=f"{version_text(nccl_version())} here (ranks sharing a GPU need "
                     f"{version_text(SHARED_GPU_NCCL)}+)")


def main(argv=None):
    args = parse_args(argv)
    # Symmetric memory refuses ranks that share a GPU unless told otherwise; NCCL's
    # variable is set by nccl_one_gpu where its version allows it.
    os.environ.setdefault("TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES", "1")
    launch(run, args, args.nproc, backend="cpu:gloo,cuda:gloo")


if __name__ == "__main__":
    main()
