"""The records bench/ddp_resnet50.py writes, one per (mode, world size), and the figures in
them. For N ranks with per-rank batch b and median step TN:

    images/s   N·b / TN
    speedup    S = N·T1 / TN: the time one process takes for an epoch of D images (D/b steps
               of T1) over the time N ranks take (D/(N·b) steps of TN); D is a multiple of
               N·b here, so there is no partial step.
    efficiency S / N
    Amdahl f   the serial fraction that S implies: S = N / (1 + f·(N-1)), f = (N/S - 1)/(N - 1)
    comm       measured two ways: (a) in training, by the hook's marks (hook_timer.py); mean
               over ranks; (b) alone: after training, the same buckets (the sizes DDP made,
               in the order it issued them, in the dtype that goes on the wire) all-reduced
               with the same backend and no compute, all issued, then all waited for; median
               of a few repetitions. share = comm / step.
    over_no_comm, over_sync_only
               a mode's step over a ceiling's (ddp_modes.CEILINGS), round by round (the same
               round of both, so a slow spell of the host touches both alike): the median of
               the rounds' ratios, and their range (_min, _max).

The scaling model. For N > 1 the alpha-beta ring model of pycomm.tools.scaling predicts each
mode's step from T1, the recorded bucket sizes (bytes on the wire) and alpha, B fitted to
harness/calibration.py's sweep (or a --calibration file). The prediction assumes no overlap
(every byte exposed); full overlap is its lower bound."""
from __future__ import annotations

import math
import statistics
import time

from . import thread_cpu, verdicts
from .ddp_modes import ddp_buckets
from .step_parts import PARTS

# Bounds on the repetitions of the comm-alone measurement (about 1 s of them).
ALONE_REPS = (3, 10)
# Which calibration predicts each mode (None: nothing to predict).
CALIBRATION_OF = {"stock": "stock", "no-comm": None, "sync-only": None, "backend": "backend"}


def scaling_figures(N, t1, tn) -> dict:
    if not t1:
        return dict(baseline_step_s=None, speedup=None, efficiency=None, amdahl_f=None)
    s = N * t1 / tn
    return dict(baseline_step_s=t1, speedup=s, efficiency=s / N,
                amdahl_f=(N / s - 1) / (N - 1) if N > 1 else None)


def baseline_record(t1, batch_size) -> dict:
    return dict(mode="baseline", world_size=1, available=True, reason=None, step_time_s=t1,
                images_per_s=batch_size / t1, comm_s=0.0, exposed_comm_s=0.0, comm_share=0.0,
                exposed_share=0.0, compute_s=t1, **scaling_figures(1, t1, t1))


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


def breakdown(trainer):
    """This rank's parts of a step (medians over the timed steps, seconds) and each thread
    group's CPU time per step: see step_parts.py and thread_cpu.py."""
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
    cal = cals.get(CALIBRATION_OF.get(mode, "pycomm"))
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
    """Each record's step over the `ceiling` mode's, round by round: key = the median of the
    rounds' ratios, key_min and key_max their range (see the module doc)."""
    base = next((r for r in records if r["mode"] == ceiling and r.get("round_step_times_s")),
                None)
    for r in records:
        if r["mode"] == "baseline" or not r.get("round_step_times_s"):
            continue
        if base is None:
            r[key] = r[key + "_min"] = r[key + "_max"] = None
            continue
        r[key], r[key + "_min"], r[key + "_max"] = verdicts.ratio(
            r["round_step_times_s"], base["round_step_times_s"], paired=True)


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
