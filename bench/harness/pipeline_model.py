"""The pipeline that tests/test_pipelining.py checks and bench/pipeline_perf.py times: a small
MLP cut into one stage per rank, the data of a step, and torch.distributed.pipelining's
PipelineStage and schedules driven over a process group.

The model is linear + tanh layers, one a stage: stage 0 maps IN_FEATURES to `hidden`, the
middle stages `hidden` to `hidden`, the last `hidden` to OUT_FEATURES (no tanh: a regression
head under a mean-squared-error loss). It is built whole, from a fixed seed, wherever it is
needed: every rank builds it and keeps its own stage, and one process can train the same
weights unsplit for a reference.

Only the manual front-end is used (PipelineStage over a module cut here, not the tracer), with
keyword arguments that torch 2.11 to 2.14 all take, and static shapes (input_args and
output_args as meta tensors): no stage infers shapes by sending pickled objects, so the
pipeline's traffic is its activations and gradients alone. The schedules scale gradients by
1 / microbatches (their default), which with a mean loss per microbatch makes a step's
gradients those of the mean loss over the whole batch.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IN_FEATURES = 8
OUT_FEATURES = 4
SCHEDULES = ("GPipe", "1F1B")
CPU = torch.device("cpu")


def loss_fn(output, target):
    return F.mse_loss(output, target)


def build_model(stages: int, hidden: int, dtype=torch.float64, seed: int = 0) -> nn.Sequential:
    """The whole model, an nn.Sequential of `stages` stage modules, with the same weights
    wherever it is built with the same arguments (the global RNG is left as it was)."""
    if stages < 2:
        raise ValueError(f"build_model: a pipeline needs 2 stages or more, got {stages}")
    widths = [IN_FEATURES] + [hidden] * (stages - 1) + [OUT_FEATURES]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        parts = [nn.Sequential(nn.Linear(widths[i], widths[i + 1]), nn.Tanh())
                 for i in range(stages - 1)]
        parts.append(nn.Sequential(nn.Linear(widths[-2], widths[-1])))
    return nn.Sequential(*parts).to(dtype)


def stage_widths(model: nn.Sequential, index: int) -> tuple:
    """(input width, output width) of stage `index`."""
    linear = model[index][0]
    return linear.in_features, linear.out_features


def batch(step: int, microbatches: int, microbatch_size: int, dtype=torch.float64):
    """(inputs, targets) of one step, the whole batch (the schedule cuts it into microbatches
    along dim 0): the same on every rank and in every process for the same step."""
    g = torch.Generator().manual_seed(1000 + step)
    n = microbatches * microbatch_size
    x = torch.randn(n, IN_FEATURES, generator=g, dtype=torch.float64)
    y = torch.randn(n, OUT_FEATURES, generator=g, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def pipeline_stage(model: nn.Sequential, index: int, microbatch_size: int, group=None):
    """Stage `index` of `model` as a PipelineStage over `group` (None: the default group),
    with its shapes given: (microbatch_size, width) in and out."""
    from torch.distributed.pipelining import PipelineStage

    dtype = next(model.parameters()).dtype
    width_in, width_out = stage_widths(model, index)
    meta = dict(dtype=dtype, device="meta")
    # requires_grad says which gradients travel (torch 2.14 reads it from the examples): the
    # outputs' come back from the next stage, the inputs' go back to the previous one, except
    # at stage 0, whose input is the data.
    return PipelineStage(model[index], index, len(model), CPU,
                         input_args=torch.empty(microbatch_size, width_in, **meta,
                                                requires_grad=index > 0),
                         output_args=torch.empty(microbatch_size, width_out, **meta,
                                                 requires_grad=True),
                         group=group)


def schedule(name: str, stage, microbatches: int):
    """The schedule `name` (one of SCHEDULES) of one stage, with the mean-squared-error loss."""
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe

    kinds = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}
    if name not in kinds:
        raise ValueError(f"schedule: name must be one of {', '.join(SCHEDULES)}, got {name!r}")
    return kinds[name](stage, microbatches, loss_fn=loss_fn)


def pipelined_step(sched, stage, x, y) -> list:
    """Forward and backward of every microbatch through the pipeline (each rank calls it with
    the same x and y; only the first stage reads x and only the last y). Returns the last
    stage's microbatch losses, detached; [] on the other stages."""
    losses = []
    if stage.is_first:
        sched.step(x)
    elif stage.is_last:
        sched.step(target=y, losses=losses)
    else:
        sched.step()
    return [loss.detach() for loss in losses]


def one_process_step(model: nn.Sequential, x, y, microbatches: int) -> list:
    """What a pipelined step computes, in one process: every stage one after another on each
    microbatch, then the gradients scaled by 1 / microbatches as the schedules do. Returns
    the microbatch losses, detached."""
    losses = []
    for xm, ym in zip(x.tensor_split(microbatches), y.tensor_split(microbatches)):
        loss = loss_fn(model(xm), ym)
        loss.backward()
        losses.append(loss.detach())
    for p in model.parameters():
        if p.grad is not None:
            p.grad.div_(microbatches)
    return losses
