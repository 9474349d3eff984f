#!/usr/bin/env python
"""ResNet-50 under DDP: the stock all-reduce beside pycomm (as a backend, and as a comm
hook) and beside the same ranks with no communication, with speedup, efficiency, the
communication share of a step, Amdahl's serial fraction, and the scaling model's
prediction of the step.

    python bench/ddp_resnet50.py                                   # 2 CPU ranks, or 1 per GPU
    python bench/ddp_resnet50.py --nproc 1,2 --json ddp.json --plot ddp.png
    python bench/ddp_resnet50.py --image-size 224 --batch-size 256  # the classic GPU setting
    torchrun --nproc-per-node 2 bench/ddp_resnet50.py

Every rank trains torchvision's resnet50 (weights=None) on a synthetic data set that
DistributedSampler shards (harness/ddp_data.py), in the modes of harness/ddp_modes.py:
no-comm and sync-only (the two ceilings), stock, ring, ring-bf16, ring-fp16 and backend
(the default: all but ring-fp16). The modes train in turns, --rounds rounds of --steps timed
steps of each (harness/ddp_trainer.py); the table gives each mode's median step, its ratio to
each ceiling round by round with the rounds' range, images/s, speedup over the 1-rank
baseline T1, efficiency, the communication in training and alone, and Amdahl's f
(harness/ddp_records.py); then the targets and, on CPU ranks, where a step goes, per rank
(harness/ddp_report.py). With several world sizes (--nproc 1,2) T1 is measured once, in the
first, and reused, so every speedup has the same T1. For N > 1 the alpha-beta model predicts
each mode's step from T1, the buckets and an all-reduce sweep run in the same invocation
(harness/calibration.py), or --calibration PATH (a bench/collectives_perf.py --json file).
"""
from __future__ import annotations

import argparse
import os
import sys

from harness.calibration import calibrations  # (harness puts pycomm on sys.path)
from harness.ddp_data import MODELS, synthetic_data
from harness.ddp_modes import CEILINGS, DEFAULT_MODES, MODES, uses_pycomm
from harness.ddp_records import baseline_record, mode_record, prediction_on, ratios
from harness.ddp_report import report
from harness.ddp_trainer import Trainer, run_baseline, train_in_turns
from harness.launch import launch, under_torchrun
from harness.peers import nccl
from harness.peers.pycomm import backend_group, ring_support
from harness.world import World
from pycomm.host_cpus import usable_cores

# Where the JSON and the plot go unless told otherwise (ignored by git).
_OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def run(args):
    """The work of one rank in one world: every mode built, then trained in turns, then
    each mode's record."""
    world = World(args.device)
    N = world.size
    on_pycomm = [m for m in args.modes if uses_pycomm(m)]
    ring_reason = ring_support(world) if on_pycomm else None
    if on_pycomm and ring_reason is None:
        import pycomm

        pycomm.init()
    world.sync_with_pycomm = ring_reason is None
    # The backend mode's group: DDP on a pycomm process group.
    world.pycomm_group, backend_reason = (backend_group(world) if "backend" in args.modes
                                          else (None, None))
    # alpha and B serve only the prediction, which needs T1.
    cals = {} if args.no_baseline and args.baseline_step_s is None else calibrations(
        world, args.calibration, ring_reason is None and any(m.startswith("ring")
                                                             for m in args.modes),
        world.pycomm_group)

    common = dict(device=world.device.type, backend=world.backend, model=args.model,
                  image_size=args.image_size, batch_size=args.batch_size, steps=args.steps,
                  rounds=args.rounds, warmup=args.warmup, sync_bn=args.sync_bn,
                  bucket_cap_mb=args.bucket_cap_mb, threads=world.torch.get_num_threads(),
                  cores=usable_cores(),
                  # The NCCL this rank ran (version and file), where the stock backend is NCCL.
                  nccl=nccl.which_text() if world.backend == "nccl" else None)
    data = synthetic_data(world, args)
    records = []
    t1 = args.baseline_step_s
    if t1 is None and not args.no_baseline:
        t1 = run_baseline(world, args, data)
        records.append(baseline_record(t1, args.batch_size))
    trainers, unavailable = [], {}
    for mode in args.modes:
        why = ring_reason if mode.startswith("ring") else \
            backend_reason if mode == "backend" else None
        if why is None:
            trainers.append(Trainer(world, args, mode, data))
        else:
            unavailable[mode] = why
    train_in_turns(world, args, trainers)
    by_mode = {t.mode: mode_record(world, args, t, t1, cals) for t in trainers}
    for mode in args.modes:
        records.append(by_mode.get(mode) or dict(mode=mode, world_size=N, available=False,
                                                 reason=unavailable[mode]))
    for ceiling in CEILINGS:
        ratios(records, ceiling, "over_" + ceiling.replace("-", "_"))
    no_comm = by_mode.get("no-comm")
    if no_comm is not None and N > 1:
        # The model again, with the no-comm step (N ranks computing side by side) as compute.
        for r in records:
            if r.get("prediction"):
                r["prediction_no_comm_compute"] = prediction_on(r, no_comm["step_time_s"])
    for r in records:
        r.update(common)
    return records


def report_and_plot(records, args):
    report(records, args)
    if args.plot:
        from ddp_plot import plot

        try:
            plot(records, args.plot)
            print(f"# wrote {args.plot}")
        except ValueError as e:  # nothing was measured
            print(f"# no plot: {e}")
        sys.stdout.flush()


# --------------------------------------------------------------------------- the command

def parse_args(argv=None):
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", default=None, metavar="RANKS[,RANKS...]",
                   help="ranks to spawn, or a comma list of world sizes run one after another "
                        "(default: one per GPU, else 2; ignored under torchrun)")
    p.add_argument("--device", choices=("cpu", "cuda"),
                   default="cuda" if torch.cuda.is_available() else "cpu",
                   help="where the ranks compute (default: cuda when a GPU is visible, else cpu)")
    p.add_argument("--model", choices=MODELS, default="resnet50",
                   help="torchvision model (smaller ones for quick tests)")
    p.add_argument("--classes", type=int, default=10, metavar="N",
                   help="output classes of the model (default 10)")
    p.add_argument("--image-size", type=int, default=None, metavar="PIXELS",
                   help="side of the synthetic square images, in pixels (default: 224 on CUDA, "
                        "as ResNet-50 trains on ImageNet; 32 on CPU, to fit a small host)")
    p.add_argument("--batch-size", type=int, default=32, metavar="IMAGES",
                   help="images per rank per step (default 32)")
    p.add_argument("--rounds", type=int, default=6, metavar="N",
                   help="rounds in turns: each round runs every mode for --steps timed steps "
                        "(default 6)")
    p.add_argument("--steps", type=int, default=3, metavar="STEPS",
                   help="timed steps of each mode in each round (default 3: 18 in all)")
    p.add_argument("--warmup", type=int, default=3, metavar="STEPS",
                   help="untimed steps of each mode before the rounds (default 3)")
    p.add_argument("--modes", default=DEFAULT_MODES, metavar="MODE[,MODE...]",
                   help=f"comma list of {', '.join(MODES)} (default {DEFAULT_MODES})")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, metavar="MiB",
                   help="DDP's bucket_cap_mb, in MiB (default 25)")
    p.add_argument("--sync-bn", action="store_true",
                   help="convert BatchNorm to SyncBatchNorm (CUDA only)")
    p.add_argument("--no-baseline", action="store_true", help="skip the 1-rank baseline")
    p.add_argument("--calibration", metavar="PATH",
                   help="alpha/B from a bench/collectives_perf.py --json file instead of a sweep")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and images (default 0)")
    p.add_argument("--json", metavar="PATH", default=os.path.join(_OUT_DIR, "ddp_resnet50.json"),
                   help="write the per-mode records here (default %(default)s; '' for none)")
    p.add_argument("--plot", metavar="PATH", default=os.path.join(_OUT_DIR, "ddp_resnet50.png"),
                   help="write a PNG of step times and speedup here (default %(default)s; '' for none)")
    args = p.parse_args(argv)
    for path in (args.json, args.plot):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        p.error(f"--modes: unknown {', '.join(bad) or '(none)'}; choose from {', '.join(MODES)}")
    args.modes = list(dict.fromkeys(modes))
    if args.sync_bn and args.device != "cuda":
        p.error("--sync-bn: SyncBatchNorm trains only on CUDA devices (it raises on CPU "
                "tensors); drop --sync-bn or use --device cuda")
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    try:
        sizes = ([gpus or 2] if args.nproc is None
                 else [int(n) for n in str(args.nproc).split(",") if n.strip()])
    except ValueError:
        p.error(f"--nproc: expected a number or a comma list of numbers, got {args.nproc!r}")
    if not sizes or min(sizes) < 1:
        p.error("--nproc: world sizes must be >= 1")
    args.gpus = gpus
    if args.image_size is None:
        args.image_size = 224 if args.device == "cuda" else 32
    args.nproc = list(dict.fromkeys(sizes))
    for name in ("steps", "rounds", "image_size", "batch_size", "classes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be >= 1")
    if args.warmup < 0:
        p.error("--warmup: must be >= 0")
    if args.calibration and not os.path.exists(args.calibration):
        p.error(f"--calibration: no such file {args.calibration!r}")
    args.stock_backend, args.stock_reason = None, None  # set by main (stock_backend)
    args.baseline_step_s = None   # set for later worlds: T1 is measured once
    return args


def stock_backend(args, ranks):
    """(backend, why not NCCL or None): harness.peers.nccl's rule for this device."""
    return nccl.stock_backend(args.device, ranks, args.gpus)


# What a run imports beyond torch and pycomm (bench/dry_run.py checks it).
DRY_RUN_NEEDS = ("torchvision", "torch.nn.parallel", "harness.peers.nccl")


def plan(args):
    """What a run would do (bench/dry_run.py prints it)."""
    import torch

    backend, why = (stock_backend(args, max(args.nproc)) if torch.cuda.is_available()
                    else ("decided on the GPU machine by bench/harness/peers/nccl.py", None))
    return dict(ranks=",".join(map(str, args.nproc)), device=args.device, modes=",".join(args.modes),
                model=f"{args.model}, {args.image_size}px, batch {args.batch_size}",
                steps=f"{args.warmup} warm-up + {args.rounds} rounds x {args.steps} timed "
                      "per mode, in turns",
                stock_backend=backend if why is None else f"{backend} ({why})")


def main(argv=None):
    import torch

    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("ddp_resnet50.py: --device cuda: no CUDA device is available")
    ranks = int(os.environ["WORLD_SIZE"]) if under_torchrun() else max(args.nproc)
    if args.device == "cuda":
        nccl.use_carried()  # the ranks load bench/gpu/build_nccl.sh's NCCL, where it was built
    args.stock_backend, args.stock_reason = stock_backend(args, ranks)
    if under_torchrun():
        records = launch(run, args, ranks, args.stock_backend)
        if int(os.environ["RANK"]) == 0:
            report_and_plot(records, args)
        return
    records = []
    for n in args.nproc:
        # One world after another; T1, measured in the first, is reused by the others.
        world_records = launch(run, args, n, args.stock_backend)
        base = next((r for r in world_records if r["mode"] == "baseline"), None)
        if base is not None:
            args.baseline_step_s = base["step_time_s"]
        records.extend(world_records)
    report_and_plot(records, args)


if __name__ == "__main__":
    main()
