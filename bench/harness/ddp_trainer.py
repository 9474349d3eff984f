"""Training the modes of bench/ddp_resnet50.py in turns.

What is timed. A step is zero_grad + forward + backward (which includes DDP's wait for the
all-reduce of every bucket) + optimizer step, on a batch already on the device, after a
barrier (every rank starts it together): the synthetic input pipeline is not part of what is
compared. Each step's time is that of the slowest rank.

In turns. Every mode is built first, each on its own model with the same initial weights;
then each mode's warm-up steps, then rounds of timed steps of each mode, every round starting
one mode further on. A slow spell of a shared host thus lands on every mode alike, and shows
in the rounds' spread rather than in one mode's time.

Where a step goes (CPU ranks). Each rank marks the end of forward, backward and the
optimizer; the comm hook marks each bucket's hand-over (hook_timer.py); pycomm's job trace
(pycomm.tools.trace) times each bucket's queue, run and completion; /proc gives the CPU time
of the compute thread and of pycomm's named threads (step_parts.py, thread_cpu.py).

The 1-rank baseline (T1). Rank 0 alone trains a plain (non-DDP, no SyncBatchNorm) copy of
the same model on batches of the same per-rank size, while the other ranks wait in a barrier
(a blocking wait, so they leave the cores to it). It runs in the same process, before the
DDP modes, with the same threads, allocator state and data; a separate 1-process spawn would
pay another start-up of torch and measure the same thing."""
from __future__ import annotations

import statistics
import sys
from collections import Counter

from . import thread_cpu
from .ddp_data import build_model, synthetic_loader
from .ddp_modes import mode_hook
from .hook_timer import HookTimer
from .step_parts import step_parts

# The trace's name of an all-reduce, dist.all_reduce's and pycomm.all_reduce's alike (one
# front-end entry).
ALL_REDUCE_JOBS = ("allreduce",)


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
        # This rank's timed steps in the order taken (round after round), and their parts.
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
        from pycomm.tools import trace

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


def train_in_turns(world, args, trainers):
    """Every trainer's warm-up, then args.rounds rounds of each one's args.steps steps, each
    round starting one trainer further on (see the module doc)."""
    from pycomm.tools import trace

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
