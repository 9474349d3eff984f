"""3D-parallel training of a small transformer on 8 CPU ranks, over pycomm.

    torchrun --standalone --nproc_per_node 8 examples/train_3d.py

The ranks form a 2 x 2 x 2 device mesh ("dp", "pp", "tp"), with "cpu:pycomm" the default
process group:
- tp: each layer's attention is split by heads and its MLP by columns
  (torch.distributed.tensor.parallel's ColwiseParallel / RowwiseParallel, Megatron-LM's split:
  two all-reduces forward and two backward per layer);
- pp: the layers are cut into two pipeline stages (torch.distributed.pipelining's
  PipelineStage with a 1F1B or GPipe schedule over mesh["pp"]'s group);
- dp: each stage's parameters are sharded over the two data-parallel ranks with FSDP2
  (fully_shard), which all-gathers them for forward and reduce-scatters the gradients.

Rank 0 prints the loss (the mean over the global batch), which goes down, checks the first
steps' losses against the same model trained in one process (same seed, same batches,
float64), checks that the dp ranks hold bitwise the same model, and prints the measured step
beside the prediction of the 3D model (pycomm/tools/scaling/three_d.py) calibrated in this run.
"""
import argparse
import hashlib
import os
import statistics
import time
import warnings
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
# fully_shard is public in torch.distributed.fsdp from torch 2.6 on (pycomm supports 2.11+).
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import pycomm  # noqa: F401  (registers the "pycomm" backend)
from pycomm.tools.scaling import Interconnect, fit_alpha_beta, three_d

MESH = (2, 2, 2)       # dp, pp, tp
DTYPE = torch.float64  # so that the only difference from one process is the order of sums
LOSS_RTOL = 1e-9       # float64 rounds at 1e-16; different sum orders stay far below this

# A linear layer's output is a view; FSDP2 warns that an in-place op on it would skip its
# hook. Nothing here (the pipeline schedule included) writes into a stage's output.
warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")


@dataclass(frozen=True)
class Config:
    vocab: int = 32
    seq: int = 16
    hidden: int = 32
    heads: int = 4
    head_dim: int = 8
    ffn: int = 128
    layers: int = 4


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.head_dim = c.head_dim
        # q, k and v of one head sit side by side in the fused weight's rows ([head][q k v]),
        # so a ColwiseParallel shard holds whole heads and attention needs a single all-reduce
        # in backward, as Megatron's fused QKV.
        self.qkv = nn.Linear(c.hidden, 3 * c.heads * self.head_dim)
        self.out = nn.Linear(c.heads * self.head_dim, c.hidden)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, -1, 3, self.head_dim).unbind(3)  # -1: this rank's heads
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(c.hidden), Attention(c)
        self.ln2, self.fc1, self.fc2 = nn.LayerNorm(c.hidden), nn.Linear(c.hidden, c.ffn), \
            nn.Linear(c.ffn, c.hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Transformer(nn.Module):
    """A GPT-style decoder. A pipeline stage is a copy with the parts of other stages set to
    None; the layers keep their names, so a stage's parameters are named as the whole's."""

    def __init__(self, c: Config):
        super().__init__()
        self.tok, self.pos = nn.Embedding(c.vocab, c.hidden), nn.Embedding(c.seq, c.hidden)
        self.layers = nn.ModuleDict({str(i): Block(c) for i in range(c.layers)})
        self.norm, self.head = nn.LayerNorm(c.hidden), nn.Linear(c.hidden, c.vocab)

    def forward(self, x):
        if self.tok is not None:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for layer in self.layers.values():
            x = layer(x)
        return self.head(self.norm(x)) if self.head is not None else x


def make_model(c: Config) -> Transformer:
    torch.manual_seed(0)  # every rank and the single-process run start from the same weights
    return Transformer(c).to(DTYPE)


def cut_stage(model: Transformer, stage: int, stages: int) -> Transformer:
    per = -(-len(model.layers) // stages)
    for name in list(model.layers):
        if not stage * per <= int(name) < (stage + 1) * per:
            del model.layers[name]
    if stage > 0:
        model.tok = model.pos = None
    if stage < stages - 1:
        model.norm = model.head = None
    return model


TP_PLAN = {"attn.qkv": ColwiseParallel(), "attn.out": RowwiseParallel(),
           "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}


def batch(step: int, c: Config, size: int):
    """The step's global batch, the same on every rank: learn y = (3x + 1) mod V."""
    x = torch.randint(c.vocab, (size, c.seq), generator=torch.Generator().manual_seed(step))
    return x, (3 * x + 1) % c.vocab


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def single_process_losses(c: Config, args, steps: int) -> list:
    model = make_model(c)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    out = []
    for step in range(steps):
        x, y = batch(step, c, args.global_batch)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def gathered_params(model: nn.Module) -> list:
    """(name, tensor) of this rank's parameters as FSDP2 gathers them for compute: whole over
    dp, this rank's slice over tp."""
    model.unshard()
    try:
        return [(name, (q.to_local() if isinstance(q, DTensor) else q).detach().clone())
                for name, q in sorted(model.named_parameters())]
    finally:
        model.reshard()


def digest(params: list) -> int:
    """A 63-bit hash of the parameters' names and bytes."""
    h = hashlib.blake2b(digest_size=8)
    for name, q in params:
        h.update(name.encode())
        h.update(q.contiguous().view(torch.uint8).numpy().tobytes())
    return int.from_bytes(h.digest(), "little") >> 1


# --------------------------------------------------------------------------- calibration

def timed(fn, repeats: int) -> float:
    """Median seconds of fn() over repeats, after one warm-up call. Every rank calls it and
    all start each call together, so that each runs with the others busy, as in training."""
    fn()
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def parallelize(model: Transformer, dp_mesh, tp_mesh) -> Transformer:
    for layer in model.layers.values():
        parallelize_module(layer, tp_mesh, TP_PLAN)
    # Resharding after forward would all-gather the parameters again for every microbatch's
    # backward; kept whole, FSDP2 gathers once a step and reduce-scatters once.
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=False)
    return model


def one_microbatch(model: nn.Module, c: Config, args, stage: int):
    """A function running one microbatch's forward and backward through a stage, alone."""
    x, y = batch(0, c, args.microbatch)
    h = torch.zeros(args.microbatch, c.seq, c.hidden, dtype=DTYPE, requires_grad=True)

    def run():
        out = model(x if stage == 0 else h)
        (loss_fn(out, y) if stage == MESH[1] - 1 else out.sum()).backward()
    return run


def measure_links(args, mesh, stage: int, act_bytes: int, grad_bytes: int) -> three_d.Links3D:
    """Each dimension's alpha and B, fitted to timings taken with all 8 ranks at it at once:
    all-reduces over tp and dp, messages between the two pp stages."""
    def allreduce_link(dim, sizes):
        group, n = mesh[dim].get_group(), mesh[dim].size()
        samples = []
        for size in sizes:
            t = torch.zeros(max(1, size // 8), dtype=DTYPE)
            samples.append((t.numel() * 8, n, timed(lambda: dist.all_reduce(t, group=group),
                                                    args.calibration_repeats)))
        alpha, bw, _ = fit_alpha_beta(samples)
        return Interconnect(f"measured-{dim}", alpha, bw, "fitted in this run")

    group = mesh["pp"].get_group()
    peer = dist.get_global_rank(group, 1 - stage)   # two stages: the same rank of the other

    def ping_pong(t):  # stage 0 sends first, stage 1 answers
        for first in (stage == 0, stage != 0):
            (dist.send if first else dist.recv)(t, peer, group=group)

    samples = []
    for size in (8, act_bytes, 4 * act_bytes):
        t = torch.zeros(size // 8, dtype=DTYPE)
        samples.append((size, timed(lambda: ping_pong(t), args.calibration_repeats) / 2))
    alpha, bw, _ = three_d.fit_point_to_point(samples)
    return three_d.Links3D(dp=allreduce_link("dp", [8, grad_bytes // 4, grad_bytes]),
                          tp=allreduce_link("tp", [8, act_bytes, 4 * act_bytes]),
                          pp=Interconnect("measured-pp", alpha, bw, "fitted in this run"))


def no_comm_microbatch_s(c: Config, args, stage: int, tp: int) -> float:
    """One microbatch's forward and backward through this rank's part of its stage, with the
    communication removed but the rest kept: 1/tp of the heads and of the MLP's columns, under
    TP and FSDP2 as in training, on meshes of this rank alone. On a CPU, DTensor's and FSDP2's
    Python work per op outweighs these tiny matrix products, so it belongs in the compute."""
    alone = init_device_mesh("cpu", (dist.get_world_size(), 1, 1),
                             mesh_dim_names=("rank", "alone_dp", "alone_tp"))
    shard = cut_stage(make_model(replace(c, heads=c.heads // tp, ffn=c.ffn // tp)), stage,
                      MESH[1])
    parallelize(shard, alone["alone_dp"], alone["alone_tp"])
    t = torch.tensor([timed(one_microbatch(shard, c, args, stage), args.calibration_repeats)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the pipeline runs at its slowest stage's pace
    return t.item()


def tp_microbatch(model: nn.Module, c: Config, args, stage: int) -> tuple:
    """One microbatch through the trained stage with its tp peer, FSDP2's traffic held off
    (the gathered parameters kept, no gradient reduce-scatter): (the all-reduces DTensor
    issues in it, its seconds)."""
    model.set_requires_gradient_sync(False)
    model.set_reshard_after_backward(False)
    run, counter = one_microbatch(model, c, args, stage), CommDebugMode()
    with counter:
        run()
    count = sum(n for op, n in counter.get_comm_counts().items()
                if "all_reduce" in str(op) or "allreduce" in str(op))
    return count, timed(run, args.calibration_repeats)


# --------------------------------------------------------------------------- training

def train(model, schedule, c: Config, args, stage: int, dp_rank: int) -> tuple:
    """Run the steps: (this rank's loss per step, 0 off the last stage; seconds per step)."""
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    local_batch = args.microbatches * args.microbatch
    mine = slice(dp_rank * local_batch, (dp_rank + 1) * local_batch)
    losses, times = torch.zeros(args.steps, dtype=DTYPE), []
    for step in range(args.steps):
        x, y = batch(step, c, args.global_batch)
        t0 = time.perf_counter()
        opt.zero_grad()
        if stage == 0:
            schedule.step(x[mine])
        else:
            microbatch_losses = []
            schedule.step(target=y[mine], losses=microbatch_losses)
            losses[step] = torch.stack([q.detach() for q in microbatch_losses]).mean()
        opt.step()
        times.append(time.perf_counter() - t0)
    return losses, times


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    p.add_argument("--check-steps", type=int, default=3,
                   help="first steps whose loss is checked against one process (default 3)")
    p.add_argument("--microbatches", type=int, default=4,
                   help="microbatches per step and dp rank (default 4)")
    p.add_argument("--microbatch", type=int, default=2, help="sequences a microbatch (default 2)")
    p.add_argument("--schedule", choices=three_d.SCHEDULES, default="1f1b",
                   help="pipeline schedule (default 1f1b)")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    p.add_argument("--calibration-repeats", type=int, default=5,
                   help="timings of each calibration measurement (default 5)")
    args = p.parse_args()

    dist.init_process_group("cpu:pycomm")
    if dist.get_world_size() != 8:
        raise SystemExit("train_3d.py: run it on 8 ranks (torchrun --nproc_per_node 8)")
    mesh = init_device_mesh("cpu", MESH, mesh_dim_names=("dp", "pp", "tp"))
    dp, pp, tp = (mesh[d].size() for d in ("dp", "pp", "tp"))
    stage = mesh["pp"].get_local_rank()
    c = Config()
    args.global_batch = dp * args.microbatches * args.microbatch

    model = parallelize(cut_stage(make_model(c), stage, pp), mesh["dp"], mesh["tp"])
    # Static shapes, so that no stage infers them by sending pickled objects (and, on torch
    # 2.14, by a trial forward and backward): tokens -> hidden states -> logits. requires_grad
    # says which gradients travel: back from the next stage, and to the previous one.
    def shape(*size, dtype=DTYPE, grad=True):
        return torch.empty(*size, dtype=dtype, device="meta", requires_grad=grad)
    mb, last = args.microbatch, stage == pp - 1
    pipe = PipelineStage(
        model, stage, pp, torch.device("cpu"), group=mesh["pp"].get_group(),
        input_args=(shape(mb, c.seq, dtype=torch.long, grad=False) if stage == 0
                    else shape(mb, c.seq, c.hidden)),
        output_args=shape(mb, c.seq, c.vocab) if last else shape(mb, c.seq, c.hidden))
    Schedule = Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe
    # Every stage gets the loss: a schedule without one runs forward only.
    schedule = Schedule(pipe, n_microbatches=args.microbatches, loss_fn=loss_fn)
    step_losses, step_times = train(model, schedule, c, args, stage, mesh["dp"].get_local_rank())

    # Each last-stage rank holds its dp shard's loss (its tp peer the same): the global
    # batch's mean is the sum over all ranks / (dp * tp).
    dist.all_reduce(step_losses)
    losses = (step_losses / (dp * tp)).tolist()
    measured = torch.tensor([statistics.mean(step_times[1:] or step_times)])  # 0: warm-up
    dist.all_reduce(measured, op=dist.ReduceOp.MAX)

    # FSDP2 keeps no replicas: each dp rank holds half of every parameter. What the dp ranks
    # must agree on bitwise is what they compute with, the parameters FSDP2 gathers.
    params = gathered_params(model)
    mine = torch.tensor([digest(params)], dtype=torch.int64)
    theirs = [torch.zeros_like(mine) for _ in range(dp)]
    dist.all_gather(theirs, mine, group=mesh["dp"].get_group())
    same = torch.tensor([float(all(torch.equal(t, mine) for t in theirs))])
    dist.all_reduce(same, op=dist.ReduceOp.MIN)

    # The model's inputs: what this run's ranks move and how fast (module doc of three_d).
    grad_bytes = torch.tensor([sum(q.numel() for _, q in params) * 8])  # all-reduced over dp
    dist.all_reduce(grad_bytes, op=dist.ReduceOp.MAX)                   # by the busiest rank
    count, with_peer_s = tp_microbatch(model, c, args, stage)
    # MAX of -count is minus the fewest: every stage's count must be the model's, not only
    # the largest.
    tp_check = torch.tensor([count, -count, with_peer_s], dtype=DTYPE)
    dist.all_reduce(tp_check, op=dist.ReduceOp.MAX)
    act_bytes = args.microbatch * c.seq * c.hidden * 8
    links = measure_links(args, mesh, stage, act_bytes, int(grad_bytes.item()))
    compute = no_comm_microbatch_s(c, args, stage, tp)

    ok = bool(same.item())
    if dist.get_rank() == 0:
        ok = report(c, args, (dp, tp, pp), losses, ok, measured.item(),
                    (-int(tp_check[1]), int(tp_check[0])), float(tp_check[2]), links, compute,
                    float(grad_bytes.item()))
    verdict = torch.tensor([float(ok)])
    dist.broadcast(verdict, src=0)
    dist.destroy_process_group()
    if not verdict.item():
        raise SystemExit(1)


def report(c: Config, args, dims, losses, same, measured_s, counted, with_peer_s, links,
           compute_s, grad_bytes) -> bool:
    """Rank 0's printout and verdict."""
    dp, tp, pp = dims
    for step in range(args.steps):
        if step % max(1, args.steps // 5) == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {losses[step]:.4f}", flush=True)
    check = min(args.check_steps, args.steps)
    ref = single_process_losses(c, args, check)
    worst = max((abs(a - b) / abs(b) for a, b in zip(losses, ref)), default=0.0)
    print(f"first {check} losses (3D / one process): "
          + ", ".join(f"{a:.12f} / {b:.12f}" for a, b in zip(losses, ref))
          + f"; worst relative error {worst:.1e}, tolerance {LOSS_RTOL:g}")

    layout = three_d.Layout3D(dp, tp, pp, args.microbatches, args.schedule)
    shape = three_d.TransformerShape(c.layers, c.hidden, c.seq, args.microbatch, 8,
                                     vocab=c.vocab)
    pred = three_d.predict_3d(layout, shape, links, compute_s, grad_bytes_per_rank=grad_bytes)
    per_mb = pred.tp.messages // args.microbatches
    fewest, most = counted
    print(f"tp all-reduces in one microbatch through a stage: "
          f"{most if fewest == most else f'{fewest}..{most}'} counted "
          f"(CommDebugMode), {per_mb} in the model (4 a layer, Megatron-LM)")
    cores = len(os.sched_getaffinity(0))
    print(f"the 3D model for this layout: links fitted to all-reduce and send/recv timings "
          f"and the no-comm compute, all measured in this run with the 8 ranks at it at once "
          f"on {cores} cores:")
    print(three_d.format_prediction_3d(pred))
    gap = (measured_s - pred.step_s) / pred.step_s
    one = pred.tp_per_microbatch_s / per_mb
    inside = (with_peer_s - compute_s) / max(most, 1)
    print(f"measured {measured_s * 1e3:.1f} ms a step, {gap:+.0%} against the model. The "
          f"model's inputs were timed with every rank doing only that; inside training a "
          f"collective also waits for peers that are computing or off their core "
          f"({dp * tp * pp / cores:g} ranks a core here): a microbatch through a stage took "
          f"{with_peer_s * 1e3:.1f} ms with its tp peer against {compute_s * 1e3:.1f} ms with "
          f"none, {inside * 1e3:.2f} ms for each of its {most} all-reduces against "
          f"{one * 1e3:.2f} ms in the timings")

    ok = (same and worst <= LOSS_RTOL and fewest == most == per_mb
          and (args.steps < 3 or losses[-1] < losses[0]))
    print(f"3D parallel dp {dp} x pp {pp} x tp {tp} (FSDP2, {args.schedule}, TP) on "
          f"cpu:pycomm: {args.steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}; first "
          f"{check} losses within {worst:.1e} of one process; dp ranks bitwise identical: "
          f"{same}; step {measured_s * 1e3:.1f} ms measured, {pred.step_s * 1e3:.1f} ms "
          f"predicted: {'OK' if ok else 'FAILED'}")
    return ok


if __name__ == "__main__":
    main()
