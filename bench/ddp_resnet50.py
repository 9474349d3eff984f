#!/usr/bin/env python
"""ResNet-50 under DDP: the stock all-reduce beside pycomm (as a backend, and as a comm
hook) and beside the same ranks with no communication, with speedup, efficiency, the
communication share of a step, Amdahl's serial fraction, and the scaling model's
prediction of the step.

    python bench/ddp_resnet50.py                                   # 2 CPU ranks, or 1 per GPU
    python bench/ddp_resnet50.py --nproc 1,2 --json ddp.json --plot ddp.png
    python bench/ddp_resnet50.py --image-size 224 --batch-size 256  # the classic GPU setting
    torchrun --nproc-per-node 2 bench/ddp_resnet50.py

Every rank trains torchvision's resnet50 (weights=None) on a synthetic data set (random
uint8 images and labels from a fixed seed, the same on every rank) that DistributedSampler
shards. The modes run one after another in one invocation, each on a fresh model with the
same initial weights:

    no-comm    DDP with a hook that reduces nothing: N ranks computing side by side with
               no communication. It is the ceiling of every other mode: on a host with fewer
               free cores than ranks it shows how much of TN - T1 is the ranks competing for
               the cores, not the all-reduce. Each mode's step / the no-comm step is the
               `/no-comm` column (the issue's target: backend and ring <= 1.03). It runs
               first and again last; the faster of the two is the ceiling.
    stock      DDP's all-reduce on the stock backend (gloo on CPUs, NCCL on GPUs; gloo on
               ranks that share a GPU where NCCL refuses that, as before 2.30), through
               torch's allreduce_hook: the Python twin of DDP's built-in path (divide the
               bucket by N, all-reduce SUM), so that its buckets can be timed like the others.
    ring       pycomm.ring_hook, fp32 average.
    ring-bf16  pycomm.ring_hook with RingState(compression="bf16"); ring-fp16 likewise.
    backend    stock DDP, no hook, on a pycomm process group (dist.new_group(backend=
               "pycomm"), what init_process_group("cpu:pycomm") gives every collective):
               DDP's own C++ path. With no hook there is nothing to mark a bucket's
               hand-over and completion, so its in-training comm and exposed columns are
               "-"; "alone" is measured as for the others, on DDP's own bucket sizes.

The default modes are no-comm, stock, ring, ring-bf16 and backend. A mode that cannot run
here (a ring mode on a CUDA device while pycomm's CUDA transport is missing; backend while
`import pycomm` registers no "pycomm" backend, or not for this device) is reported as
unavailable with the reason.

What is timed. A step is zero_grad + forward + backward (which includes DDP's wait for the
all-reduce of every bucket) + optimizer step, on a batch already on the device: the
synthetic input pipeline is not part of what is compared. Each step's time is that of the
slowest rank (DDP's steps end together anyway); the table gives the median over the timed
steps, after warm-up steps that are not timed.

The 1-rank baseline (T1). Rank 0 alone trains a plain (non-DDP, no SyncBatchNorm) copy of
the same model on batches of the same per-rank size, forward + backward + optimizer step,
while the other ranks wait in a barrier (a blocking wait, so they leave the cores to it).
It runs in the same process, before the DDP modes, with the same threads, allocator state
and data; a separate 1-process spawn would pay another start-up of torch and measure the
same thing. With several world sizes (--nproc 1,2) it is measured once, in the first, and
reused, so every speedup has the same T1.

The figures, for N ranks with per-rank batch b and median step TN:
    images/s   N·b / TN
    speedup    S = N·T1 / TN: the time one process takes for an epoch of D images (D/b steps
               of T1) over the time N ranks take (D/(N·b) steps of TN); D is a multiple of
               N·b here, so there is no partial step.
    efficiency S / N
    Amdahl f   the serial fraction that S implies: S = N / (1 + f·(N-1)), f = (N/S - 1)/(N - 1)
    comm       measured two ways:
               (a) in training: the hook is wrapped; it marks when DDP hands it a bucket and
                   when the bucket's future completes. Per step, "comm" is the time at least
                   one bucket was in flight (the union of those intervals) and "exposed" is
                   the wait after the last bucket was handed over (backward was done by then,
                   so only waiting was left): max(done) - max(handed over). Mean over ranks.
               (b) alone: after training, the same buckets (the sizes DDP made, in the order
                   it issued them, in the dtype that goes on the wire) are all-reduced with
                   the same backend and no compute: all issued, then all waited for. Median
                   of a few repetitions.
               share = comm / step. The step-time plot splits each step into compute
               (step - exposed) and exposed communication.
On GPUs the marks are CUDA events (a future's callback runs on a stream that waited for the
all-reduce), resolved after the step synchronizes.

The scaling model. For N > 1 the α-β ring model of pycomm.tools.scaling predicts each
mode's step from T1, the recorded bucket sizes (bytes on the wire) and α, B fitted to a
short all-reduce sweep run in the same invocation (stock backend for `stock`, pycomm's
direct API for the ring modes, the pycomm group for `backend`), or to `--calibration PATH`
(a bench/collectives_perf.py --json file; `backend` then uses its pycomm column too). The
prediction assumes no overlap (every byte exposed); full overlap is its lower bound.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import time

from harness.collectives import COLLECTIVES  # (harness puts pycomm on sys.path)
from harness.launch import launch, under_torchrun
from harness.peers import nccl
from harness.peers.pycomm import backend_group, ring_support
from harness.table import Column, Table
from harness.timing import Clock, sample
from harness.world import World
from pycomm.tools import results_schema as schema

# Where the JSON and the plot go unless told otherwise (ignored by git).
_OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")

MODES = {"stock": None, "ring": None, "ring-bf16": "bf16", "ring-fp16": "fp16", "no-comm": None,
         "backend": None}
MODELS = ("resnet18", "resnet34", "resnet50")
DEFAULT_MODES = "no-comm,stock,ring,ring-bf16,backend"
# The issue's target for the modes that use pycomm: step <= this x the no-comm step.
NO_COMM_TARGET = 1.03
# Distinct batches per rank in the synthetic data set; the loader cycles through them.
# A few keep 224-pixel data of 8 ranks x 256 images within host memory.
BATCHES_PER_RANK = 4
# Sizes of the all-reduce sweep that calibrates alpha and B: an 8-byte call pins alpha,
# the large ones B (DDP's buckets are up to 25 MiB).
CALIBRATION_SIZES = (8, 64 << 10, 1 << 20, 8 << 20, 32 << 20)
ALL_REDUCE = COLLECTIVES["all_reduce"]
# Bounds on the repetitions of the comm-alone measurement (about 1 s of them).
ALONE_REPS = (3, 10)


# --------------------------------------------------------------------------- timing

class HookTimer:
    """Wraps a DDP comm hook to mark, per bucket, when DDP hands it over and when its
    future completes."""

    def __init__(self, hook, clock, wire_dtype=None):
        self.clock = clock
        # [bucket index, numel, gradient dtype, dtype on the wire, handed-over mark, done mark]
        self.events = []

        # A function, not a callable object: DDP reads the hook's __name__.
        def timed_hook(state, bucket):
            buffer = bucket.buffer()
            entry = [bucket.index(), buffer.numel(), buffer.dtype, wire_dtype or buffer.dtype,
                     self.clock.mark(), None]
            self.events.append(entry)
            fut = hook(state, bucket)

            def done(f):
                entry[5] = self.clock.mark()
                return f.value()

            return fut.then(done)

        self.hook = timed_hook

    def step_comm(self, start):
        """(comm, exposed) seconds of the step that began at `start`; see the module doc."""
        spans = sorted((self.clock.seconds(start, e[4]), self.clock.seconds(start, e[5]))
                       for e in self.events if e[5] is not None)
        if not spans:
            return 0.0, 0.0
        busy, lo, hi = 0.0, spans[0][0], spans[0][1]
        for s, e in spans[1:]:
            if s > hi:
                busy += hi - lo
                lo, hi = s, e
            else:
                hi = max(hi, e)
        busy += hi - lo
        exposed = max(0.0, max(e for _, e in spans) - max(s for s, _ in spans))
        return busy, exposed

    def buckets(self):
        """(numel, gradient dtype, wire dtype) of each bucket, in the order of the last step."""
        return [(e[1], e[2], e[3]) for e in self.events]

    def reset(self):
        self.events = []


# --------------------------------------------------------------------------- the ranks

def synthetic_loader(world, args, sharded: bool):
    """An endless iterator of (images, labels) batches on the device: the epochs of a data
    set of BATCHES_PER_RANK batches per rank, sharded by DistributedSampler when `sharded`."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    g = torch.Generator().manual_seed(args.seed)
    n = args.batch_size * world.size * BATCHES_PER_RANK
    # uint8 images, as a decoder would produce them: a quarter of the host memory of fp32.
    images = torch.randint(0, 256, (n, 3, args.image_size, args.image_size), dtype=torch.uint8,
                           generator=g)
    labels = torch.randint(0, args.classes, (n,), generator=g)
    data = TensorDataset(images, labels)
    if sharded:
        sampler = DistributedSampler(data, num_replicas=world.size, rank=world.rank,
                                     shuffle=True, seed=args.seed, drop_last=True)
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    else:
        sampler = None
        loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(args.seed))
    pin = world.device.type == "cuda"

    def batches():
        epoch = 0
        while True:
            if sampler is not None:
                sampler.set_epoch(epoch)
            for x, y in loader:
                if pin:
                    x, y = x.pin_memory(), y.pin_memory()
                x = x.to(world.device, non_blocking=True).float().div_(255.0)
                yield x, y.to(world.device, non_blocking=True)
            epoch += 1

    return batches()


def build_model(world, args, sync_bn: bool):
    import torch
    import torchvision

    torch.manual_seed(args.seed)  # the same initial weights in every mode and on every rank
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=args.classes)
    if sync_bn:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(world.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    return model, opt


def train(world, args, model, opt, batches, label, timer=None):
    """Runs the warm-up and timed steps; returns per-step seconds and (comm, exposed)."""
    import torch.nn.functional as F

    bar = None
    tqdm = _tqdm() if world.rank == 0 else None
    if tqdm is not None:
        phase = "warm-up" if args.warmup else "timed"
        bar = tqdm(total=args.warmup + args.steps, desc=f"{label} {phase}", unit="step",
                   file=sys.stderr, leave=True, mininterval=0.5, dynamic_ncols=True)
    clock = world.clock
    times, comm, exposed = [], [], []
    model.train()
    for i in range(args.warmup + args.steps):
        x, y = next(batches)
        clock.sync()
        if timer is not None:
            timer.reset()
        start = clock.mark()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        end = clock.mark()
        clock.sync()
        if i >= args.warmup:
            times.append(clock.seconds(start, end))
            if timer is not None:
                c, e = timer.step_comm(start)
                comm.append(c)
                exposed.append(e)
        if bar is not None:
            if i + 1 == args.warmup:
                bar.set_description(f"{label} timed")
            bar.set_postfix_str(f"{clock.seconds(start, end) * 1e3:.0f} ms/step", refresh=False)
            bar.update()
    if bar is not None:
        bar.close()
    return times, comm, exposed


def _tqdm():
    """tqdm's progress bar class, or None where tqdm is not installed (no bar then)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def run_baseline(world, args):
    """T1: rank 0 alone, no DDP (see the module doc); the others wait. Returns T1 (s) on
    every rank."""
    import torch

    t1 = 0.0
    if world.rank == 0:
        model, opt = build_model(world, args, sync_bn=False)
        batches = synthetic_loader(world, args, sharded=False)
        times, _, _ = train(world, args, model, opt, batches, f"{'baseline':<9} N=1")
        t1 = statistics.median(times)
        del model, opt
    world.barrier()
    return world.reduce([t1], torch.distributed.ReduceOp.MAX)[0]


def mode_hook(mode, world):
    """(state, hook, dtype on the wire or None for the gradients' own, and the all-reduce of
    one tensor for the comm-alone measurement, or None)."""
    import torch

    if mode == "no-comm":
        def no_comm_hook(state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        return None, no_comm_hook, None, None
    if mode == "stock":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def issue(t):
            return world.dist.all_reduce(t, async_op=True)

        return None, default_hooks.allreduce_hook, None, issue
    if mode == "backend":
        # No hook: DDP's own all-reduce, on the pycomm group.
        def issue(t):
            return world.dist.all_reduce(t, group=world.pycomm_group, async_op=True)

        return None, None, None, issue
    import pycomm
    from pycomm.hooks import RingState, ring_hook

    compression = MODES[mode]
    op = "avg" if compression is None else "sum"

    def issue(t):
        return pycomm.all_reduce(t, op=op, async_op=True)

    wire = {None: None, "bf16": torch.bfloat16, "fp16": torch.float16}[compression]
    return RingState(compression=compression), ring_hook, wire, issue


def ddp_buckets(ddp):
    """(numel, gradient dtype, wire dtype) of DDP's buckets, from its logging data: a mode
    with no hook has no other view of them. After the first steps DDP has rebuilt them in
    the order gradients became ready; its sizes are in bytes."""
    data = ddp._get_ddp_logging_data()
    sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
    dtype = next(p.dtype for p in ddp.module.parameters() if p.requires_grad)
    return [(int(b) // dtype.itemsize, dtype, dtype) for b in re.findall(r"\d+", str(sizes))]


def comm_alone(world, buckets, issue):
    """Median seconds to all-reduce `buckets` (numel, gradient dtype, wire dtype) with no
    compute."""
    import torch

    if issue is None:
        return 0.0
    tensors = [torch.zeros(n, dtype=wire, device=world.device) for n, _, wire in buckets]

    def once():
        world.barrier()
        world.clock.sync()
        t0 = time.perf_counter()
        works = [issue(t) for t in tensors]
        for w in works:
            w.wait()
        world.clock.sync()
        return time.perf_counter() - t0

    # A warm-up call, whose time (the same on every rank) fixes the repetitions: about 1 s.
    first = world.reduce([once()], world.dist.ReduceOp.MAX)[0]
    n = int(min(ALONE_REPS[1], max(ALONE_REPS[0], 1.0 / max(first, 1e-6))))
    samples = [once() for _ in range(n)]
    return world.reduce([statistics.median(samples)], world.dist.ReduceOp.MAX)[0]


def calibration_sweep(world, with_pycomm: bool):
    """collectives_perf-style all_reduce rows (size, world_size, stock_us, pycomm_us and,
    with a pycomm group, backend_us) for a few sizes: each call's wall time, synchronized
    (what a training step waits), median of a few after one untimed call."""
    clock = Clock(world.device, events=False)
    rows = []
    for size in CALIBRATION_SIZES:
        lay = ALL_REDUCE.layout(size, 4, world.size)
        t = world.torch.zeros(lay["count"], device=world.device)
        reps = 20 if size <= (1 << 20) else 5

        def median_us(fn):
            fn()
            return statistics.median(sample(fn, reps, clock)) * 1e6

        stock_us = median_us(lambda: world.dist.all_reduce(t))
        pycomm_us = None
        if with_pycomm:
            import pycomm

            pycomm_us = median_us(lambda: pycomm.all_reduce(t))
        backend_us = None
        if world.pycomm_group is not None:
            backend_us = median_us(lambda: world.dist.all_reduce(t, group=world.pycomm_group))
        rows.append({schema.COLLECTIVE: "all_reduce", schema.SIZE: lay["size"],
                     schema.COUNT: lay["count"], schema.DTYPE: "float32", schema.OP: "sum",
                     schema.WORLD_SIZE: world.size, schema.STOCK_BACKEND: world.backend,
                     schema.STOCK_US: stock_us, schema.PYCOMM_US: pycomm_us,
                     "backend_us": backend_us, schema.WRONG: 0, schema.STOCK_WRONG: 0})
    return rows


def calibrations(world, args, with_pycomm: bool):
    """{"stock": Calibration or reason, "pycomm": ..., "backend": ...}: alpha and B for the
    model; "backend" (the pycomm group) only when there is one."""
    from pycomm.tools import scaling

    if world.size < 2:
        return {}
    with_backend = world.pycomm_group is not None
    if args.calibration:
        source = backend_source = args.calibration  # a file has one pycomm column for both
    else:
        source = calibration_sweep(world, with_pycomm)
        backend_source = [dict(r, pycomm_us=r["backend_us"]) for r in source]
    out = {}
    for name, src, column in (("stock", source, "stock"), ("pycomm", source, "pycomm"),
                              ("backend", backend_source, "pycomm")):
        if (name == "pycomm" and not with_pycomm) or (name == "backend" and not with_backend):
            continue
        try:
            out[name] = scaling.calibrate(src, backend=column)
        except (ValueError, OSError) as e:
            out[name] = f"no calibration: {e}"
    return out


def run_mode(world, args, mode, unavailable, t1, cals, contended=None):
    """Trains one mode under DDP; returns its record (meaningful on rank 0)."""
    import gc

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    N, b = world.size, args.batch_size
    record = dict(mode=mode, world_size=N, available=unavailable is None, reason=unavailable)
    if unavailable is not None:
        return record
    state, hook, wire, issue = mode_hook(mode, world)
    model, opt = build_model(world, args, sync_bn=args.sync_bn)
    ddp = DDP(model, device_ids=[world.device.index] if world.device.type == "cuda" else None,
              bucket_cap_mb=args.bucket_cap_mb,
              process_group=world.pycomm_group if mode == "backend" else None)
    timer = None
    if hook is not None:
        timer = HookTimer(hook, world.clock, wire)
        ddp.register_comm_hook(state, timer.hook)
    batches = synthetic_loader(world, args, sharded=True)
    world.barrier()
    times, comm, exposed = train(world, args, ddp, opt, batches, f"{mode:<9} N={N}", timer)
    buckets = timer.buckets() if timer is not None else ddp_buckets(ddp)
    del ddp, model, opt, batches
    gc.collect()

    # The slowest rank's time per step; communication averaged over the ranks.
    times = world.reduce(times, torch.distributed.ReduceOp.MAX)
    step = statistics.median(times)
    comm_s = exposed_s = None  # not measured without a hook
    if timer is not None:
        comm = [c / N for c in world.reduce(comm + exposed, torch.distributed.ReduceOp.SUM)]
        comm, exposed = comm[:len(times)], comm[len(times):]
        comm_s, exposed_s = statistics.median(comm), statistics.median(exposed)
    alone = comm_alone(world, buckets, issue)

    grad_bytes = [n * dtype.itemsize for n, dtype, _ in buckets]
    wire_bytes = [n * wire.itemsize for n, _, wire in buckets]
    record.update(
        step_time_s=step, step_times_s=times, images_per_s=N * b / step,
        comm_s=comm_s, exposed_comm_s=exposed_s,
        comm_share=None if comm_s is None else comm_s / step,
        exposed_share=None if exposed_s is None else exposed_s / step,
        compute_s=None if exposed_s is None else step - exposed_s,
        comm_alone_s=alone, comm_alone_share=alone / step,
        buckets=len(buckets), bucket_bytes=grad_bytes, wire_bytes=wire_bytes,
        grad_bytes=sum(grad_bytes), calibration=None, prediction=None,
    )
    record.update(scaling_figures(N, t1, step))
    cal = cals.get({"stock": "stock", "no-comm": None, "backend": "backend"}.get(mode, "pycomm"))
    if isinstance(cal, str):
        record["calibration"] = cal
    elif cal is not None and t1:
        from pycomm.tools import scaling

        p = scaling.compare_with_measurement(measured_step_s=step, step_compute_s=t1,
                                             bucket_bytes=wire_bytes, world_size=N,
                                             calibration=cal, overlap=0.0)
        record["calibration"] = dict(
            backend=cal.backend, alpha_s=cal.alpha_s,
            bandwidth_Bps=None if math.isinf(cal.bandwidth_Bps) else cal.bandwidth_Bps,
            rows=cal.rows, max_relative_error=cal.max_relative_error,
            source=cal.source or "sweep in this run")
        record["prediction"] = dict(
            overlap=0.0, predicted_step_s=p.predicted_step_s, relative_error=p.relative_error,
            comm_s=p.comm_s, no_overlap_step_s=p.no_overlap_step_s,
            full_overlap_step_s=p.full_overlap_step_s, step_compute_s=t1)
        if contended:
            record["prediction_no_comm_compute"] = prediction_on(record, contended)
    return record


def prediction_on(record, compute_s):
    """The model's step for a mode's record, with compute_s (the no-comm step) as the compute."""
    from pycomm.tools import scaling

    cal = record["calibration"]
    bandwidth = cal["bandwidth_Bps"] if cal["bandwidth_Bps"] is not None else math.inf
    q = scaling.compare_with_measurement(measured_step_s=record["step_time_s"],
                                         step_compute_s=compute_s,
                                         bucket_bytes=record["wire_bytes"],
                                         world_size=record["world_size"], alpha_s=cal["alpha_s"],
                                         bandwidth_Bps=bandwidth, overlap=0.0)
    return dict(overlap=0.0, predicted_step_s=q.predicted_step_s,
                relative_error=q.relative_error, full_overlap_step_s=q.full_overlap_step_s,
                step_compute_s=compute_s)


def scaling_figures(N, t1, tn):
    if not t1:
        return dict(baseline_step_s=None, speedup=None, efficiency=None, amdahl_f=None)
    s = N * t1 / tn
    return dict(baseline_step_s=t1, speedup=s, efficiency=s / N,
                amdahl_f=(N / s - 1) / (N - 1) if N > 1 else None)


def run(args):
    """The work of one rank in one world."""
    world = World(args.device)
    N = world.size
    names = [m for m in args.modes if m.startswith("ring")]
    ring_reason = ring_support(world) if names else None
    if names and ring_reason is None:
        import pycomm

        pycomm.init()
    # The backend mode's group: DDP on a pycomm process group.
    world.pycomm_group, backend_reason = (backend_group(world) if "backend" in args.modes
                                          else (None, None))
    # alpha and B serve only the prediction, which needs T1.
    cals = {} if args.no_baseline and args.baseline_step_s is None else \
        calibrations(world, args, with_pycomm=ring_reason is None and bool(names))

    common = dict(device=world.device.type, backend=world.backend, model=args.model,
                  image_size=args.image_size, batch_size=args.batch_size, steps=args.steps,
                  warmup=args.warmup, sync_bn=args.sync_bn, bucket_cap_mb=args.bucket_cap_mb,
                  threads=world.torch.get_num_threads())
    records = []
    t1 = args.baseline_step_s
    if t1 is None and not args.no_baseline:
        t1 = run_baseline(world, args)
        records.append(dict(mode="baseline", world_size=1, available=True, reason=None,
                            step_time_s=t1, images_per_s=args.batch_size / t1,
                            comm_s=0.0, exposed_comm_s=0.0, comm_share=0.0, exposed_share=0.0,
                            compute_s=t1, **scaling_figures(1, t1, t1)))
    contended = None
    # no-comm first: its step is the compute of N ranks side by side, for the model.
    for mode in sorted(args.modes, key=lambda m: m != "no-comm"):
        unavailable = ring_reason if mode.startswith("ring") else \
            backend_reason if mode == "backend" else None
        records.append(run_mode(world, args, mode, unavailable, t1, cals, contended))
        if mode == "no-comm" and N > 1:
            contended = records[-1]["step_time_s"]
    if contended is not None and len(args.modes) > 1:
        # no-comm once more, last: the first run also pays for warming the ranks
        # up (allocations, page faults), which would flatter every later mode.
        # The ceiling is the faster of the two.
        again = run_mode(world, args, "no-comm", None, t1, cals, contended)
        first = next(i for i, r in enumerate(records) if r["mode"] == "no-comm")
        if again.get("step_time_s") and again["step_time_s"] < records[first]["step_time_s"]:
            records[first] = again
            # The model's compute is the no-comm step the table shows: this one.
            for r in records:
                if r.get("prediction_no_comm_compute"):
                    r["prediction_no_comm_compute"] = prediction_on(r, again["step_time_s"])
    # Each mode's step over the no-comm step of the same ranks: 1.0 is the ceiling.
    no_comm = next((r.get("step_time_s") for r in records if r["mode"] == "no-comm"), None)
    for r in records:
        r.update(common)
        if r["mode"] != "baseline":
            r["over_no_comm"] = (r["step_time_s"] / no_comm
                                 if no_comm and r.get("step_time_s") else None)
    return records


# --------------------------------------------------------------------------- the report

MODE_TABLE = Table([
    Column("mode", 10, "mode", align="<"), Column("N", 3, "world_size", "d"),
    Column("step ms", 9, "step_time_s", ".1f", 1e3), Column("/no-comm", 8, "over_no_comm", ".3f"),
    Column("images/s", 9, "images_per_s", ".1f"), Column("speedup", 7, "speedup", ".3f"),
    Column("eff", 6, "efficiency", ".1%"), None,
    Column("comm ms", 8, "comm_s", ".1f", 1e3), Column("exposed", 8, "exposed_comm_s", ".1f", 1e3),
    Column("share", 6, "comm_share", ".1%"), None,
    Column("alone ms", 8, "comm_alone_s", ".1f", 1e3),
    Column("share", 6, "comm_alone_share", ".1%"), None,
    Column("Amdahl f", 8, "amdahl_f", ".3f")])


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


def report(records, args):
    base = next((r for r in records if r["mode"] == "baseline"), None)
    first = records[0]
    sizes = sorted({r["world_size"] for r in records if r["mode"] != "baseline"})
    print(f"# {first['model']} under DDP on {first['device']} ({first['backend']}): "
          f"N = {', '.join(map(str, sizes))}; {first['image_size']}x{first['image_size']} "
          f"images, batch {first['batch_size']} per rank, {first['threads']} thread(s) per rank; "
          f"median of {first['steps']} timed steps after {first['warmup']} warm-up")
    if args.gpus and max(sizes) > args.gpus:
        print(f"# {max(sizes)} ranks share {args.gpus} GPU(s): without MPS their kernels take "
              f"turns on each GPU, so the step times compare the all-reduces' cost to the ranks, "
              f"not a multi-GPU step (no NVLink traffic, no overlap across GPUs)")
    if args.stock_reason:
        print(f"# stock backend {args.stock_backend}, not NCCL: {args.stock_reason}")
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
    print("# /no-comm: step / the no-comm step of the same ranks (1.0: communication costs "
          "nothing); comm: time a bucket was in flight per step (hook futures; '-': no hook); "
          "exposed: the wait after backward; alone: the same buckets all-reduced with no "
          "compute; share = of the step")
    judged = [r for r in records if r["mode"] in ("backend", "ring")
              and r.get("over_no_comm") is not None and r["world_size"] > 1]
    if judged:
        verdicts = [f"{r['mode']} N={r['world_size']} {r['over_no_comm']:.3f}x "
                    f"({'met' if r['over_no_comm'] <= NO_COMM_TARGET else 'MISSED'})"
                    for r in judged]
        print(f"# target: backend and ring at most {NO_COMM_TARGET:g}x the no-comm step: "
              + "; ".join(verdicts))
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
    if args.json:
        schema.write(args.json, records)
        print(f"# wrote {args.json}")
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
    p.add_argument("--steps", type=int, default=18, metavar="STEPS",
                   help="timed steps per mode (18: five modes and the baseline in about the "
                        "time three took at 25)")
    p.add_argument("--warmup", type=int, default=3, metavar="STEPS",
                   help="untimed steps per mode before them (default 3)")
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
    for name in ("steps", "image_size", "batch_size", "classes"):
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
                steps=f"{args.warmup} warm-up + {args.steps} timed per mode",
                stock_backend=backend if why is None else f"{backend} ({why})")


def main(argv=None):
    import torch

    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("ddp_resnet50.py: --device cuda: no CUDA device is available")
    ranks = int(os.environ["WORLD_SIZE"]) if under_torchrun() else max(args.nproc)
    args.stock_backend, args.stock_reason = stock_backend(args, ranks)
    if under_torchrun():
        records = launch(run, args, ranks, args.stock_backend)
        if int(os.environ["RANK"]) == 0:
            report(records, args)
        return
    records = []
    for n in args.nproc:
        # One world after another; T1, measured in the first, is reused by the others.
        world_records = launch(run, args, n, args.stock_backend)
        base = next((r for r in world_records if r["mode"] == "baseline"), None)
        if base is not None:
            args.baseline_step_s = base["step_time_s"]
        records.extend(world_records)
    report(records, args)


if __name__ == "__main__":
    main()
