#!/usr/bin/env python
"""A 1F1B pipeline step on pycomm beside gloo: torch.distributed.pipelining's Schedule1F1B over
one stage a rank, with a no-communication ceiling and the unsplit model in one process.

    python bench/pipeline_perf.py                                  # 4 ranks, hidden 64 and 256
    python bench/pipeline_perf.py --hidden 1024 --microbatches 16 --rounds 7 --json pp.json
    torchrun --nproc-per-node 4 bench/pipeline_perf.py

The model is bench/harness/pipeline_model.py's (tests/test_pipelining.py checks its values):
linear + tanh layers, one a stage, `--hidden` wide, cut into as many stages as ranks. A step
is zero_grad, Schedule1F1B's step over --microbatches microbatches of --microbatch-size rows
(forward and backward of each, the gradients scaled by 1 / microbatches) and an SGD step of
the stage's weights. Every step trains on the same batch.

Columns, measured side by side in one run, in turns (each round: pycomm, gloo, no-comm,
1-proc; --rounds rounds), each on its own copy of the model from the same weights:
  pycomm   the pipeline's stages over dist.new_group(backend="pycomm") (absent, with a line
           saying why, when `import pycomm` has not registered the backend). Its sends and
           receives are the backend's, forwarded to gloo or native: this bench does not care
  gloo     the pipeline's stages over the default group, which the bench starts with gloo
  no-comm  the ceiling: every rank at once runs its stage's forward and backward of each
           microbatch and the same SGD step, on local tensors of the shapes it would have
           received, with no send, no receive, no wait for a neighbour and no schedule. A
           pipelined step does all of that compute plus its traffic and its bubble (the
           first stage waits for the last to turn a microbatch around), so it cannot be
           faster; on a host with fewer cores than ranks the ranks also share the cores
           here as they do in a step (the bound W / cores that core sharing sets, W the
           ranks' work summed)
  1-proc   rank 0 alone runs the unsplit model over the same microbatches (every stage one
           after another, as pipeline_model.one_process_step) and an SGD step of all the
           weights, while the other ranks wait in a blocking gloo reduction: what the
           pipeline is meant to beat. Its `speedup` = 1-proc time / pycomm time

Time. Each rank times every step; a step's time is the slowest rank's; a round's time is the
median of its --steps steps (after --warmup untimed ones); the time reported is the median of
the rounds and the spread (the `+-` column, in %) is (slowest - fastest round) / median.
Ratios: `gloo/pyc` = gloo time / pycomm time; `of_ceil` = no-comm time / pycomm time (1 when
the pipeline costs nothing beyond its compute).

#wrong. The pycomm and gloo copies take the same number of steps on the same batch, so their
weights must end bitwise equal: #wrong counts the elements that differ, summed over the ranks.

--json writes pycomm.tools.results_schema's layout: a row per --hidden, with collective =
pipeline_1f1b (no reader takes it for an all-reduce), world_size, stages, dtype, hidden,
microbatches, microbatch_size, size and count (one activation message between two stages, in
bytes and elements), params, steps, per column <peer>_us, _spread and _rounds_us with the
peers named pycomm_backend, gloo, no_comm and one_process, ceiling_us (= no_comm_us),
frac_of_ceiling, gloo_over_pycomm, speedup and wrong.
"""
from __future__ import annotations

import argparse
import statistics
import time

from harness import driver  # (harness puts pycomm on sys.path)
from harness import pipeline_model as pm
from harness.launch import under_torchrun
from harness.peers import pycomm as pycomm_peers
from harness.sizes import human
from harness.table import Column, Table
from harness.timing import summarize
from harness.world import World
from pycomm.tools import results_schema as schema

COLLECTIVE = "pipeline_1f1b"
DTYPES = ("float32", "float64")
LR = 0.01
# (JSON key, table label) of each column, in the order of a round.
PEERS = ((schema.PYCOMM_BACKEND, "pycomm"), (schema.GLOO, "gloo"), ("no_comm", "no-comm"),
         ("one_process", "1-proc"))


class Pipelined:
    """This rank's stage of a fresh model, trained through Schedule1F1B over `group`."""

    def __init__(self, args, world, hidden, group):
        torch = world.torch
        self.model = pm.build_model(world.size, hidden, args.torch_dtype)
        self.stage = pm.pipeline_stage(self.model, world.rank, args.microbatch_size, group)
        self.sched = pm.schedule("1F1B", self.stage, args.microbatches)
        self.params = list(self.model[world.rank].parameters())
        self.opt = torch.optim.SGD(self.params, lr=LR)
        self.x, self.y = pm.batch(0, args.microbatches, args.microbatch_size, args.torch_dtype)

    def step(self):
        self.opt.zero_grad()
        pm.pipelined_step(self.sched, self.stage, self.x, self.y)
        self.opt.step()


class NoComm:
    """This rank's stage of a fresh model, its compute alone: the inputs it would receive and
    the gradients it would be sent back are local tensors of their shapes."""

    def __init__(self, args, world, hidden):
        torch = world.torch
        model = pm.build_model(world.size, hidden, args.torch_dtype)
        self.part, self.m = model[world.rank], args.microbatches
        self.first, self.last = world.rank == 0, world.rank == world.size - 1
        x, y = pm.batch(0, args.microbatches, args.microbatch_size, args.torch_dtype)
        width_in, width_out = pm.stage_widths(model, world.rank)
        g = torch.Generator().manual_seed(world.rank)

        def local(width):
            return torch.randn(args.microbatch_size, width, generator=g).to(args.torch_dtype)

        # A received activation requires grad: its gradient is what a stage sends back.
        self.inputs = (x.tensor_split(self.m) if self.first else
                       [local(width_in).requires_grad_() for _ in range(self.m)])
        self.targets = y.tensor_split(self.m)
        self.out_grads = [local(width_out) for _ in range(self.m)]
        self.params = list(self.part.parameters())
        self.opt = torch.optim.SGD(self.params, lr=LR)

    def step(self):
        self.opt.zero_grad()
        for i in range(self.m):
            self.inputs[i].grad = None
            out = self.part(self.inputs[i])
            if self.last:
                pm.loss_fn(out, self.targets[i]).backward()
            else:
                out.backward(self.out_grads[i])
        for p in self.params:
            p.grad.div_(self.m)
        self.opt.step()


class OneProcess:
    """The unsplit model on rank 0; nothing on the other ranks."""

    def __init__(self, args, world, hidden):
        self.active = world.rank == 0
        if self.active:
            self.model = pm.build_model(world.size, hidden, args.torch_dtype)
            self.opt = world.torch.optim.SGD(self.model.parameters(), lr=LR)
            self.x, self.y = pm.batch(0, args.microbatches, args.microbatch_size,
                                      args.torch_dtype)
            self.m = args.microbatches

    def step(self):
        if self.active:
            self.opt.zero_grad()
            pm.one_process_step(self.model, self.x, self.y, self.m)
            self.opt.step()


def round_time(world, step, steps: int, warmup: int) -> float:
    """Seconds of a step: the median over `steps` steps of the slowest rank's time. The
    steps run back to back (a pipeline's ranks keep one another in step by their traffic);
    the times are compared only after the last one, so no reduction runs between steps."""
    world.barrier()
    for _ in range(warmup):
        step()
    mine = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        mine.append(time.perf_counter() - t0)
    return statistics.median(world.max_over_ranks(mine))


def differing_elements(world, ours, theirs) -> int:
    """Elements of this rank's weights that differ bitwise, summed over the ranks."""
    torch = world.torch
    # Compared as integers of the same width: bitwise, whatever the floats hold.
    bits = {4: torch.int32, 8: torch.int64}[ours[0].element_size()]
    mine = sum(int((a.detach().view(bits) != b.detach().view(bits)).sum())
               for a, b in zip(ours, theirs))
    return int(world.sum_over_ranks([mine])[0])


def measure(args, world, hidden, group) -> dict:
    runs = {}
    if group is not None:
        runs[schema.PYCOMM_BACKEND] = Pipelined(args, world, hidden, group)
    runs[schema.GLOO] = Pipelined(args, world, hidden, None)
    runs["no_comm"] = NoComm(args, world, hidden)
    runs["one_process"] = OneProcess(args, world, hidden)
    times = {key: [] for key in runs}
    for _ in range(args.rounds):
        for key, run_ in runs.items():
            times[key].append(round_time(world, run_.step, args.steps, args.warmup))
    esize = world.torch.empty((), dtype=args.torch_dtype).element_size()
    row = dict(collective=COLLECTIVE, schedule="1F1B", world_size=world.size,
               stages=world.size, dtype=args.dtype, op="none", hidden=hidden,
               microbatches=args.microbatches, microbatch_size=args.microbatch_size,
               count=args.microbatch_size * hidden, size=args.microbatch_size * hidden * esize,
               params=sum(p.numel() for p in runs[schema.GLOO].model.parameters()),
               steps=args.steps)
    for key, _ in PEERS:
        rounds = times.get(key)
        t, spread = summarize(rounds) if rounds else (None, None)
        row[schema.column(key, "us")] = None if t is None else t * 1e6
        row[schema.column(key, "spread")] = spread
        row[schema.column(key, "rounds_us")] = [x * 1e6 for x in rounds or []]
    pyc, gloo, ceiling, one = (row[schema.column(key, "us")] for key in
                               (schema.PYCOMM_BACKEND, schema.GLOO, "no_comm", "one_process"))
    row[schema.CEILING_US] = ceiling
    row[schema.PYCOMM_PEER] = schema.PYCOMM_BACKEND if pyc else None
    row[schema.FRAC_OF_CEILING] = ceiling / pyc if pyc else None
    row[schema.GLOO_OVER_PYCOMM] = gloo / pyc if pyc else None
    row[schema.SPEEDUP] = one / pyc if pyc else None
    row[schema.WRONG] = (differing_elements(world, runs[schema.PYCOMM_BACKEND].params,
                                            runs[schema.GLOO].params) if pyc else None)
    return row


def table_of() -> Table:
    cols = [Column("hidden", 6, "hidden", "d"), Column("mbs", 4, "microbatches", "d"),
            Column("rows", 4, "microbatch_size", "d"),
            Column("message", 9, lambda r: human(r["size"]), ""), None]
    for key, label in PEERS:
        cols += [Column(f"{label} us", max(9, len(label) + 3), f"{key}_us", ".0f"),
                 Column("+-%", 4, f"{key}_spread", ".0f", 100), None]
    cols += [Column("gloo/pyc", 8, "gloo_over_pycomm", ".2f"),
             Column("of_ceil", 7, "frac_of_ceiling", ".2f"),
             Column("speedup", 7, "speedup", ".2f"), Column("#wrong", 6, "wrong", "d")]
    return Table(cols)


def header_lines(args, world, note):
    return [f"1F1B pipeline step, pycomm vs {world.backend}: {world.size} ranks, one stage each "
            f"(linear + tanh), {args.dtype}, {args.microbatches} microbatches, {args.rounds} "
            f"rounds of {args.steps} steps (+{args.warmup} warm-up), "
            f"{world.torch.get_num_threads()} thread(s) per rank",
            "us: a step (zero_grad, schedule step, SGD step), median of rounds of the median "
            "step of the slowest rank; +-: spread across rounds, %; message: one activation",
            note,
            "gloo = the default group; no-comm = each rank's stage compute alone, every rank "
            "at once (the ceiling); 1-proc = the unsplit model on rank 0 alone",
            "gloo/pyc = gloo / pycomm; of_ceil = no-comm / pycomm; speedup = 1-proc / pycomm; "
            "#wrong: weight elements where pycomm's copy differs from gloo's, over the ranks"]


def run(args):
    world = World()
    if world.size < 2:
        raise SystemExit("pipeline_perf.py: a pipeline needs 2 ranks or more")
    if args.microbatches < world.size:
        raise SystemExit(f"pipeline_perf.py: 1F1B needs --microbatches >= ranks "
                         f"({args.microbatches} < {world.size})")
    args.torch_dtype = getattr(world.torch, args.dtype)
    group, why = pycomm_peers.backend_group(world)
    note = (f"pycomm absent: {why}" if group is None else
            f"pycomm = dist.new_group(backend={pycomm_peers.BACKEND!r}) as the stages' group")
    table = table_of()
    if world.rank == 0:
        driver.print_header(header_lines(args, world, note))
        print(table.header(), flush=True)
    rows = []
    for hidden in args.hidden:
        rows.append(measure(args, world, hidden, group))
        if world.rank == 0:
            print(table.row(rows[-1]), flush=True)
    if world.rank != 0:
        return
    summary = []
    if group is not None:
        ratios = [r["gloo_over_pycomm"] for r in rows]
        summary.append(f"gloo/pyc {min(ratios):.2f}x..{max(ratios):.2f}x, of_ceil "
                       f"{min(r['frac_of_ceiling'] for r in rows):.2f}.."
                       f"{max(r['frac_of_ceiling'] for r in rows):.2f}, #wrong total "
                       f"{sum(r['wrong'] for r in rows)}")
    meta = dict(world_size=world.size, dtype=args.dtype, schedule="1F1B",
                microbatches=args.microbatches, microbatch_size=args.microbatch_size,
                rounds=args.rounds, steps=args.steps, warmup=args.warmup,
                stock_backend=world.backend, notes=[note],
                threads=world.torch.get_num_threads(),
                time="one step, median of rounds of the median step of the slowest rank",
                size="bytes of one activation message between two stages",
                ceiling="no-comm: each rank's stage compute alone, every rank at once")
    driver.report(args, "summary:", summary, rows, meta)


def positive_ints(text: str) -> list:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 64,256, got {text!r}")
    return values


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nproc", "--ranks", type=int, default=4, metavar="RANKS",
                   help="ranks to spawn, one stage each, 2 or more (ignored under torchrun)")
    p.add_argument("--hidden", type=positive_ints, default="64,256", metavar="N[,N...]",
                   help="width of the hidden layers; a row each")
    p.add_argument("--microbatches", type=int, default=8, metavar="N",
                   help="microbatches a step (1F1B: at least one a stage)")
    p.add_argument("--microbatch-size", type=int, default=16, metavar="ROWS",
                   help="rows of a microbatch")
    p.add_argument("-d", "--dtype", choices=DTYPES, default="float32", help="element type")
    p.add_argument("--rounds", type=int, default=5, metavar="N",
                   help="times each column is measured, in turns")
    p.add_argument("--steps", type=int, default=10, metavar="N", help="timed steps a round")
    p.add_argument("-w", "--warmup", type=int, default=2, metavar="N",
                   help="untimed steps before each round's")
    driver.add_json_option(p)
    args = p.parse_args(argv)
    if args.nproc < 2:
        p.error(f"--nproc: a pipeline needs 2 ranks or more, got {args.nproc}")
    # Under torchrun the ranks are torchrun's: run() checks the microbatches against them.
    if not under_torchrun() and args.microbatches < args.nproc:
        p.error(f"--microbatches: 1F1B needs one a stage at least ({args.nproc}), "
                f"got {args.microbatches}")
    if min(args.microbatch_size, args.rounds, args.steps) < 1 or args.warmup < 0:
        p.error("--microbatch-size, --rounds and --steps must be >= 1, --warmup >= 0")
    return args


if __name__ == "__main__":
    driver.main(parse_args, run)
