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
shards. Every mode is built first, each on its own model with the same initial weights; then
they run in turns: each mode's warm-up steps, then --rounds rounds of --steps timed steps of
each mode, every round starting one mode further on. A slow spell of a shared host thus
lands on every mode alike, and shows in the rounds' spread rather than in one mode's time.

    no-comm    DDP with a hook that reduces nothing: N ranks computing side by side with
               no communication. On a host with fewer free cores than ranks it shows how
               much of TN - T1 is the ranks competing for the cores, not the all-reduce.
    sync-only  DDP whose hook all-reduces one element per bucket (on pycomm's worker, as
               the ring's buckets go; the stock backend where pycomm cannot run): every rank
               waits for the slowest at each bucket, as in every mode, but no gradient bytes
               move. What a mode adds over it is what moving the bytes costs.
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
               "-" (pycomm's job trace still times its buckets for the breakdown); "alone" is
               measured as for the others, on DDP's own bucket sizes.

The default modes are no-comm, sync-only, stock, ring, ring-bf16 and backend. A mode that
cannot run here (a ring mode on a CUDA device while pycomm's CUDA transport is missing;
backend while `import pycomm` registers no "pycomm" backend, or not for this device) is
reported as unavailable with the reason.

What is timed. A step is zero_grad + forward + backward (which includes DDP's wait for the
all-reduce of every bucket) + optimizer step, on a batch already on the device, after a
barrier (every rank starts it together): the synthetic input pipeline is not part of what is
compared. Each step's time is that of the slowest rank; the table gives the median over the
timed steps. `/no-comm` and `/sync-only` are taken round by round (a mode's median step in a
round over the ceiling's in the same round): the median over the rounds, and their range. The
targets: ring and backend at most 1.03x the sync-only (and the no-comm) step, backend at most
the ring's step + 1%. When the ranks' compute threads fill every core, whatever CPU time the
all-reduce takes comes out of theirs, so a mode's step cannot go below sync-only + N x (the
CPU time its buckets take alone) / cores: the bench prints that floor.

Where a step goes (CPU ranks). Each rank marks the end of forward, backward and the
optimizer; the comm hook marks each bucket's hand-over; pycomm's job trace
(pycomm.tools.trace) times each bucket's queue, run and completion; /proc gives the CPU time
of the compute thread and of pycomm's named threads (harness/step_parts.py,
harness/thread_cpu.py). A second table prints the medians, per rank.

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
from collections import Counter

from harness.collectives import COLLECTIVES  # (harness puts pycomm on sys.path)
from harness.launch import launch, under_torchrun
from harness.peers import nccl
from harness.peers.pycomm import backend_group, ring_support
from harness.step_parts import PARTS, step_parts, union_length
from harness.table import Column, Table
from harness.timing import Clock, sample
from harness.world import World
from pycomm.tools import results_schema as schema
from pycomm.tools import trace
from harness import thread_cpu

# Where the JSON and the plot go unless told otherwise (ignored by git).
_OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")

MODES = {"stock": None, "ring": None, "ring-bf16": "bf16", "ring-fp16": "fp16", "no-comm": None,
         "sync-only": None, "backend": None}
MODELS = ("resnet18", "resnet34", "resnet50")
DEFAULT_MODES = "no-comm,sync-only,stock,ring,ring-bf16,backend"
# The targets for the modes that use pycomm: ring and backend at most this times the
# sync-only step (and the no-comm step), and backend at most the ring's step + BACKEND_OVER_RING.
NO_COMM_TARGET = 1.03
BACKEND_OVER_RING = 0.01
# Distinct batches per rank in the synthetic data set; the loader cycles through them.
# A few keep 224-pixel data of 8 ranks x 256 images within host memory.
BATCHES_PER_RANK = 4
# Sizes of the all-reduce sweep that calibrates alpha and B: an 8-byte call pins alpha,
# the large ones B (DDP's buckets are up to 25 MiB).
CALIBRATION_SIZES = (8, 64 << 10, 1 << 20, 8 << 20, 32 << 20)
ALL_REDUCE = COLLECTIVES["all_reduce"]
# The trace's names of an all-reduce: through the c10d backend, and pycomm.all_reduce.
ALL_REDUCE_JOBS = ("allreduce", "all_reduce")
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
        spans = [(self.clock.seconds(start, e[4]), self.clock.seconds(start, e[5]))
                 for e in self.events if e[5] is not None]
        if not spans:
            return 0.0, 0.0
        exposed = max(0.0, max(e for _, e in spans) - max(s for s, _ in spans))
        return union_length(spans), exposed

    def handovers(self):
        """(handed over, done or None) marks of each bucket of the step (CPU clock only)."""
        return [(e[4], e[5]) for e in self.events]

    def buckets(self):
        """(numel, gradient dtype, wire dtype) of each bucket, in the order of the last step."""
        return [(e[1], e[2], e[3]) for e in self.events]

    def reset(self):
        self.events = []


# --------------------------------------------------------------------------- the ranks

def synthetic_data(world, args):
    """The synthetic data set every mode shares: BATCHES_PER_RANK batches per rank of
    uint8 images (as a decoder would produce them: a quarter of the host memory of fp32)
    and labels, from a fixed seed, the same on every rank."""
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(args.seed)
    n = args.batch_size * world.size * BATCHES_PER_RANK
    images = torch.randint(0, 256, (n, 3, args.image_size, args.image_size), dtype=torch.uint8,
                           generator=g)
    labels = torch.randint(0, args.classes, (n,), generator=g)
    return TensorDataset(images, labels)


def synthetic_loader(world, args, data, sharded: bool):
    """An endless iterator of (images, labels) batches on the device: the epochs of `data`,
    sharded by DistributedSampler when `sharded`."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

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


def train_step(world, model, opt, batches, barrier=True):
    """One step: zero_grad, forward, backward, optimizer. With `barrier`, every rank starts
    it together. Returns its marks on the device's clock: (start, forward done, backward
    done, end)."""
    import torch.nn.functional as F

    x, y = next(batches)
    if barrier:
        world.barrier()
    clock = world.clock
    clock.sync()
    start = clock.mark()
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    forward = clock.mark()
    loss.backward()
    backward = clock.mark()
    opt.step()
    end = clock.mark()
    clock.sync()
    return start, forward, backward, end


class Progress:
    """Rank 0's progress bar on stderr (none where tqdm is missing, or on other ranks)."""

    def __init__(self, world, total, label):
        self.bar = None
        if world.rank == 0:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=total, desc=label, unit="step", file=sys.stderr, leave=True,
                            mininterval=0.5, dynamic_ncols=True)

    def step(self, label, seconds):
        if self.bar is not None:
            self.bar.set_description(label, refresh=False)
            self.bar.set_postfix_str(f"{seconds * 1e3:.0f} ms/step", refresh=False)
            self.bar.update()

    def close(self):
        if self.bar is not None:
            self.bar.close()


def run_baseline(world, args, data):
    """T1: rank 0 alone, no DDP (see the module doc); the others wait. Returns T1 (s) on
    every rank."""
    import torch

    t1 = 0.0
    if world.rank == 0:
        model, opt = build_model(world, args, sync_bn=False)
        batches = synthetic_loader(world, args, data, sharded=False)
        model.train()
        bar = Progress(world, args.warmup + args.rounds * args.steps, "baseline N=1")
        times = []
        for i in range(args.warmup + args.rounds * args.steps):
            start, _, _, end = train_step(world, model, opt, batches, barrier=False)
            seconds = world.clock.seconds(start, end)
            if i >= args.warmup:
                times.append(seconds)
            bar.step("baseline N=1", seconds)
        bar.close()
        t1 = statistics.median(times)
        del model, opt
    world.barrier()
    return world.reduce([t1], torch.distributed.ReduceOp.MAX)[0]


class Trainer:
    """One mode ready to train: its DDP model (the same initial weights as every other
    mode's), optimizer, hook and data. Every mode is built before any is timed, so that the
    rounds take them in turns."""

    def __init__(self, world, args, mode, data):
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.world, self.args, self.mode = world, args, mode
        state, hook, self.wire, self.issue = mode_hook(mode, world)
        model, self.opt = build_model(world, args, sync_bn=args.sync_bn)
        self.ddp = DDP(model,
                       device_ids=[world.device.index] if world.device.type == "cuda" else None,
                       bucket_cap_mb=args.bucket_cap_mb,
                       process_group=world.pycomm_group if mode == "backend" else None)
        self.ddp.train()
        self.timer = None
        if hook is not None:
            self.timer = HookTimer(hook, world.clock, self.wire)
            self.ddp.register_comm_hook(state, self.timer.hook)
        self.batches = synthetic_loader(world, args, data, sharded=True)
        # This rank's timed steps in the order taken (round after round), and theirs parts.
        self.times, self.comm, self.exposed, self.parts = [], [], [], []
        self.cpu = Counter()  # CPU seconds per thread group over the timed steps

    def step(self):
        """(seconds, marks, the hook's hand-overs) of one step."""
        if self.timer is not None:
            self.timer.reset()
        marks = train_step(self.world, self.ddp, self.opt, self.batches)
        handovers = self.timer.handovers() if self.timer is not None else []
        return self.world.clock.seconds(marks[0], marks[-1]), marks, handovers

    def turn(self, bar, round_index=None):
        """This mode's turn in round `round_index`: args.steps timed steps; None: its
        args.warmup untimed steps."""
        world, args = self.world, self.args
        timed = round_index is not None
        label = f"{self.mode} N={world.size} " + (f"round {round_index + 1}/{args.rounds}"
                                                   if timed else "warm-up")
        on_cpu = world.device.type == "cpu"
        if on_cpu:
            trace.take()  # what earlier turns and set-up left
            before = thread_cpu.snapshot()
        steps = []
        for _ in range(args.steps if timed else args.warmup):
            seconds, marks, handovers = self.step()
            steps.append((marks, handovers))
            if timed:
                self.times.append(seconds)
                if self.timer is not None:
                    c, e = self.timer.step_comm(marks[0])
                    self.comm.append(c)
                    self.exposed.append(e)
            bar.step(label, seconds)
        if not (timed and on_cpu):
            return
        self.cpu.update(thread_cpu.since(before))
        world.barrier()  # the completion lanes have recorded this turn's jobs by now
        jobs = trace.take()
        for (start, forward, backward, end), handovers in steps:
            # The buckets' all-reduces (DDP's buffer broadcast in forward is not one).
            mine = [j for j in jobs if j.what in ALL_REDUCE_JOBS and start <= j.queued_at <= end]
            self.parts.append(step_parts(start, forward, backward, end, handovers, mine))


def mode_hook(mode, world):
    """(state, hook, dtype on the wire or None for the gradients' own, and the all-reduce of
    one tensor for the comm-alone measurement, or None)."""
    import torch

    import pycomm

    if mode == "no-comm":
        def no_comm_hook(state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        return None, no_comm_hook, None, None
    if mode == "sync-only":
        # One element per bucket, all-reduced as the ring's buckets are (pycomm's worker,
        # where it runs here; else the stock backend): every rank waits for the slowest at
        # each bucket, as in every mode, and no gradient bytes move.
        if world.sync_with_pycomm:
            def sync(flag):
                return pycomm.all_reduce(flag, async_op=True)
        else:
            def sync(flag):
                return world.dist.all_reduce(flag, async_op=True)

        def sync_only_hook(state, bucket):
            buffer = bucket.buffer()
            flag = torch.zeros(1, device=buffer.device)
            return sync(flag).get_future().then(lambda _: buffer)

        return None, sync_only_hook, None, None
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
    from pycomm.hooks import RingState, ring_hook

    compression = MODES[mode]
    op = "avg" if compression is None else "sum"

    def issue(t):
        # As ring_hook calls it: no restore copy (DDP discards a failed step's buckets).
        return pycomm.all_reduce(t, op=op, async_op=True, restore_on_failure=False)

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
    """(median seconds to all-reduce `buckets` (numel, gradient dtype, wire dtype) with no
    compute, and the CPU seconds per call of the threads besides the caller's: pycomm's
    worker and lane, or gloo's; mean over the ranks)."""
    import torch

    if issue is None:
        return 0.0, 0.0
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
    before = thread_cpu.snapshot()
    samples = [once() for _ in range(n)]
    spent = thread_cpu.since(before)
    cpu = sum(v for k, v in spent.items() if k != "main") / n
    seconds = world.reduce([statistics.median(samples)], world.dist.ReduceOp.MAX)[0]
    return seconds, world.reduce([cpu])[0] / world.size


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


def breakdown(trainer):
    """This rank's parts of a step (medians over the timed steps, seconds) and each thread
    group's CPU time per step: see harness/step_parts.py and harness/thread_cpu.py."""
    out = {}
    for part in PARTS:
        values = [p[part] for p in trainer.parts if p[part] is not None]
        out[part] = statistics.median(values) if values else None
    steps = max(1, len(trainer.times))
    out["cpu"] = {group: seconds / steps for group, seconds in sorted(trainer.cpu.items())}
    return out


def mode_record(world, args, trainer, t1, cals):
    """A trained mode's record (meaningful on rank 0); every rank calls it, in mode order."""
    import torch

    N, b, mode = world.size, args.batch_size, trainer.mode
    record = dict(mode=mode, world_size=N, available=True, reason=None)
    buckets = trainer.timer.buckets() if trainer.timer is not None else ddp_buckets(trainer.ddp)
    # The slowest rank's time per step; communication averaged over the ranks.
    times = world.reduce(trainer.times, torch.distributed.ReduceOp.MAX)
    step = statistics.median(times)
    rounds = [statistics.median(times[r * args.steps:(r + 1) * args.steps])
              for r in range(args.rounds)]
    comm_s = exposed_s = None  # not measured without a hook
    if trainer.timer is not None:
        comm = [c / N for c in world.reduce(trainer.comm + trainer.exposed,
                                            torch.distributed.ReduceOp.SUM)]
        comm, exposed = comm[:len(times)], comm[len(times):]
        comm_s, exposed_s = statistics.median(comm), statistics.median(exposed)
    alone, alone_cpu = comm_alone(world, buckets, trainer.issue)
    parts = [None] * N
    world.dist.all_gather_object(parts, breakdown(trainer) if trainer.parts else None)

    grad_bytes = [n * dtype.itemsize for n, dtype, _ in buckets]
    # sync-only moves one element per bucket, whatever the bucket's size.
    wire_bytes = ([dtype.itemsize for _, dtype, _ in buckets] if mode == "sync-only"
                  else [n * wire.itemsize for n, _, wire in buckets])
    record.update(
        step_time_s=step, step_times_s=times, round_step_times_s=rounds,
        images_per_s=N * b / step,
        comm_s=comm_s, exposed_comm_s=exposed_s,
        comm_share=None if comm_s is None else comm_s / step,
        exposed_share=None if exposed_s is None else exposed_s / step,
        compute_s=None if exposed_s is None else step - exposed_s,
        comm_alone_s=alone, comm_alone_share=alone / step, comm_alone_cpu_s=alone_cpu,
        buckets=len(buckets), bucket_bytes=grad_bytes, wire_bytes=wire_bytes,
        grad_bytes=sum(grad_bytes), calibration=None, prediction=None,
        breakdown=parts if any(parts) else None,
    )
    record.update(scaling_figures(N, t1, step))
    cal = cals.get({"stock": "stock", "no-comm": None, "sync-only": None,
                    "backend": "backend"}.get(mode, "pycomm"))
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
    return record


def ratios(records, ceiling: str, key: str):
    """Each record's step over the `ceiling` mode's, round by round (the same round of both,
    so a slow spell of the host touches both alike): key = the median of the rounds'
    ratios, key_min and key_max their range."""
    base = next((r for r in records if r["mode"] == ceiling and r.get("round_step_times_s")),
                None)
    for r in records:
        if r["mode"] == "baseline" or not r.get("round_step_times_s"):
            continue
        if base is None:
            r[key] = r[key + "_min"] = r[key + "_max"] = None
            continue
        each = [m / c for m, c in zip(r["round_step_times_s"], base["round_step_times_s"])]
        r[key], r[key + "_min"], r[key + "_max"] = statistics.median(each), min(each), max(each)


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
    uses_pycomm = [m for m in args.modes if m.startswith("ring") or m == "sync-only"]
    ring_reason = ring_support(world) if uses_pycomm else None
    if uses_pycomm and ring_reason is None:
        import pycomm

        pycomm.init()
    world.sync_with_pycomm = ring_reason is None
    # The backend mode's group: DDP on a pycomm process group.
    world.pycomm_group, backend_reason = (backend_group(world) if "backend" in args.modes
                                          else (None, None))
    # alpha and B serve only the prediction, which needs T1.
    cals = {} if args.no_baseline and args.baseline_step_s is None else \
        calibrations(world, args, with_pycomm=ring_reason is None
                     and any(m.startswith("ring") for m in args.modes))

    common = dict(device=world.device.type, backend=world.backend, model=args.model,
                  image_size=args.image_size, batch_size=args.batch_size, steps=args.steps,
                  rounds=args.rounds, warmup=args.warmup, sync_bn=args.sync_bn,
                  bucket_cap_mb=args.bucket_cap_mb, threads=world.torch.get_num_threads(),
                  cores=usable_cores())
    data = synthetic_data(world, args)
    records = []
    t1 = args.baseline_step_s
    if t1 is None and not args.no_baseline:
        t1 = run_baseline(world, args, data)
        records.append(dict(mode="baseline", world_size=1, available=True, reason=None,
                            step_time_s=t1, images_per_s=args.batch_size / t1,
                            comm_s=0.0, exposed_comm_s=0.0, comm_share=0.0, exposed_share=0.0,
                            compute_s=t1, **scaling_figures(1, t1, t1)))
    trainers, unavailable = [], {}
    for mode in args.modes:
        why = ring_reason if mode.startswith("ring") else \
            backend_reason if mode == "backend" else None
        if why is None:
            trainers.append(Trainer(world, args, mode, data))
        else:
            unavailable[mode] = why
    # In turns: every mode's warm-up, then round after round of args.steps steps of each
    # mode, starting each round one mode further on, so that a slow spell of the host lands
    # on every mode alike and shows in the rounds' spread.
    bar = Progress(world, len(trainers) * (args.warmup + args.rounds * args.steps), "")
    if world.device.type == "cpu":
        trace.start()
    try:
        for t in trainers:
            t.turn(bar)
        for r in range(args.rounds):
            for t in trainers[r % len(trainers):] + trainers[:r % len(trainers)]:
                t.turn(bar, r)
    finally:
        trace.stop()
        bar.close()
    by_mode = {t.mode: mode_record(world, args, t, t1, cals) for t in trainers}
    for mode in args.modes:
        records.append(by_mode.get(mode) or dict(mode=mode, world_size=N, available=False,
                                                 reason=unavailable[mode]))
    ratios(records, "no-comm", "over_no_comm")
    ratios(records, "sync-only", "over_sync_only")
    no_comm = by_mode.get("no-comm")
    if no_comm is not None and N > 1:
        # The model again, with the no-comm step (N ranks computing side by side) as compute.
        for r in records:
            if r.get("prediction"):
                r["prediction_no_comm_compute"] = prediction_on(r, no_comm["step_time_s"])
    for r in records:
        r.update(common)
    return records


def usable_cores() -> int:
    """Cores this process may run on (its affinity), which every rank shares."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- the report

def _range(key):
    """A ratio's range over the rounds, "min-max"."""
    def show(r):
        lo, hi = r.get(key + "_min"), r.get(key + "_max")
        return None if lo is None or hi is None else f"{lo:.3f}-{hi:.3f}"
    return show


MODE_TABLE = Table([
    Column("mode", 10, "mode", align="<"), Column("N", 3, "world_size", "d"),
    Column("step ms", 8, "step_time_s", ".1f", 1e3), None,
    Column("/no-comm", 8, "over_no_comm", ".3f"), Column("rounds", 11, _range("over_no_comm")),
    Column("/sync-only", 10, "over_sync_only", ".3f"),
    Column("rounds", 11, _range("over_sync_only")), None,
    Column("images/s", 8, "images_per_s", ".1f"), Column("speedup", 7, "speedup", ".3f"),
    Column("eff", 6, "efficiency", ".1%"), None,
    Column("comm ms", 7, "comm_s", ".1f", 1e3), Column("exposed", 7, "exposed_comm_s", ".1f", 1e3),
    Column("share", 6, "comm_share", ".1%"), None,
    Column("alone ms", 8, "comm_alone_s", ".1f", 1e3),
    Column("share", 6, "comm_alone_share", ".1%"), Column("cpu ms", 6, "comm_alone_cpu_s", ".1f", 1e3),
    None,
    Column("Amdahl f", 8, "amdahl_f", ".3f")])


def _part(name, group=None):
    """A breakdown cell: a part of the step, or a thread group's CPU time per step."""
    return lambda r: r["cpu"].get(group) if group else r.get(name)


BREAKDOWN_TABLE = Table([
    Column("mode", 10, "mode", align="<"), Column("N", 3, "world_size", "d"),
    Column("rank", 4, "rank", "d"), Column("forward", 7, _part("forward"), ".1f", 1e3),
    Column("backward", 8, _part("backward"), ".1f", 1e3),
    Column("finalize", 8, _part("finalize"), ".2f", 1e3),
    Column("optim", 6, _part("optimizer"), ".1f", 1e3), None,
    Column("buckets", 7, _part("buckets"), ".0f"), Column("queue", 6, _part("queue"), ".2f", 1e3),
    Column("run", 6, _part("run"), ".2f", 1e3), Column("complete", 8, _part("complete"), ".2f", 1e3),
    Column("in flight", 9, _part("in_flight"), ".1f", 1e3), None,
    Column("main cpu", 8, _part("", "main"), ".1f", 1e3),
    Column("worker", 6, _part("", "pycomm-worker"), ".2f", 1e3),
    Column("lane", 6, _part("", "pycomm-lane"), ".2f", 1e3),
    Column("other", 6, _part("", "other"), ".2f", 1e3)])


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


def _verdict(value, target) -> str:
    return "met" if value <= target else "MISSED"


def floor_over_sync_only(record, sync):
    """The least step / sync-only step a mode can reach when its ranks' compute threads
    already fill every core: whatever CPU time its all-reduce takes (measured alone) comes
    out of theirs. None where cores are left over, or nothing was measured."""
    if sync is None or not record.get("comm_alone_cpu_s") or record["device"] != "cpu":
        return None
    n, cores = record["world_size"], record["cores"]
    if n * record["threads"] < cores:
        return None
    return 1 + n * record["comm_alone_cpu_s"] / (cores * sync["step_time_s"])


def targets(records):
    """The target lines: ring and backend against sync-only and no-comm, and backend against
    the ring, each from the rounds' ratios (median, and range over the rounds)."""
    lines = []
    for n in sorted({r["world_size"] for r in records if r["mode"] != "baseline"}):
        if n < 2:
            continue
        by_mode = {r["mode"]: r for r in records
                   if r["world_size"] == n and r.get("round_step_times_s")}
        judged = [by_mode[m] for m in ("ring", "backend") if m in by_mode]
        for key, ceiling in (("over_sync_only", "sync-only"), ("over_no_comm", "no-comm")):
            got = [r for r in judged if r.get(key) is not None]
            if got:
                lines.append(
                    f"# target N={n}: ring and backend at most {NO_COMM_TARGET:g}x the {ceiling} "
                    "step: " + "; ".join(
                        f"{r['mode']} {r[key]:.3f}x ({r[key + '_min']:.3f}-{r[key + '_max']:.3f}, "
                        f"{_verdict(r[key], NO_COMM_TARGET)})" for r in got))
        if "backend" in by_mode and "ring" in by_mode:
            each = [b / r for b, r in zip(by_mode["backend"]["round_step_times_s"],
                                          by_mode["ring"]["round_step_times_s"])]
            med = statistics.median(each)
            lines.append(f"# target N={n}: backend at most the ring's step + "
                         f"{BACKEND_OVER_RING:.0%}: backend/ring {med:.3f} ({min(each):.3f}-"
                         f"{max(each):.3f}, {_verdict(med, 1 + BACKEND_OVER_RING)})")
        sync = by_mode.get("sync-only")
        floors = [(r["mode"], floor_over_sync_only(r, sync)) for r in judged]
        floors = [(m, f) for m, f in floors if f is not None]
        if floors:
            lines.append(f"# N={n}: the floor when the ranks' compute threads fill every core "
                         "(sync-only + the CPU time the same buckets take alone, ranks x cpu ms "
                         "/ cores): " + "; ".join(f"{m} {f:.3f}x" for m, f in floors))
        if sync is not None and sync.get("over_no_comm") is not None:
            lines.append(f"# N={n}: sync-only/no-comm {sync['over_no_comm']:.3f} "
                         f"({sync['over_no_comm_min']:.3f}-{sync['over_no_comm_max']:.3f}): what "
                         "waiting for the slowest rank at each bucket costs, with no bytes moved")
    return lines


def report(records, args):
    base = next((r for r in records if r["mode"] == "baseline"), None)
    first = next(r for r in records if r["mode"] != "baseline")
    sizes = sorted({r["world_size"] for r in records if r["mode"] != "baseline"})
    print(f"# {first['model']} under DDP on {first['device']} ({first['backend']}): "
          f"N = {', '.join(map(str, sizes))}; {first['image_size']}x{first['image_size']} "
          f"images, batch {first['batch_size']} per rank, {first['threads']} thread(s) per rank; "
          f"the modes in turns, {first['rounds']} rounds of {first['steps']} timed steps each, "
          f"after {first['warmup']} warm-up; a step's time is the slowest rank's, and the "
          "table gives the median")
    crowded = [n for n in sizes if first["device"] == "cpu" and n * first["threads"] > first["cores"]]
    if crowded:
        print(f"# OVERSUBSCRIBED: N = {', '.join(map(str, crowded))} ranks x {first['threads']} "
              f"thread(s) on {first['cores']} cores: the ranks take turns on the cores, and "
              "pycomm's worker takes its time from them; every mode pays it, no-comm too")
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
    print("# /no-comm, /sync-only: the median over the rounds of step / that mode's step in the "
          "same round (no-comm: communication costs nothing; sync-only: one element per bucket, "
          "so only the waiting for the slowest rank), and the rounds' range; comm: time a "
          "bucket was in flight per step (hook futures; '-': no hook); exposed: the wait after "
          "backward; alone: the same buckets all-reduced with no compute, and its cpu: the CPU "
          "time per call of the threads besides the caller's (pycomm's worker and lane, or "
          "gloo's), per rank; share = of the step")
    for line in targets(records):
        print(line)
    rows = [dict(part, mode=r["mode"], world_size=r["world_size"], rank=rank) for r in records
            for rank, part in enumerate(r.get("breakdown") or []) if part]
    if rows:
        print("# where a step goes, per rank, ms (medians over the timed steps; "
              "harness/step_parts.py): forward, backward (its finalize: after the last "
              "bucket's hand-over), optimizer; per step, summed over the buckets' pycomm jobs: "
              "queued, running, to completion; CPU time per step of the compute thread, "
              "pycomm's worker and completion lane, and the other threads")
        print(BREAKDOWN_TABLE.header())
        for row in rows:
            print(BREAKDOWN_TABLE.row(row))
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
