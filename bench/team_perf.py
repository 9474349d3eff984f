"""A rank's thread team on large messages: pycomm groups that differ only in their team's
size (PYCOMM_THREADS, docs/settings.md), measured side by side in one run, in turns.

    python3 bench/team_perf.py --nproc 2 --threads 1,2,4,8 -b 1M -e 64M
    python3 bench/team_perf.py --nproc 1 --threads 1,2 --collective all_reduce

For each collective and size, every team size is timed in turns, --rounds times: a round's
time is the slowest rank's median call, the reported time the median of the rounds and
`+-` their spread ((slowest - fastest) / median, %). `xN` is the team of one's time over
this team's: the speed-up the team gives. Before the timings every group runs each
collective once on integer-valued inputs and every rank checks the result exactly (#wrong,
summed over ranks); the teams' results are also compared bitwise with the team of one's.

The groups are made one after another with PYCOMM_THREADS set in the environment, so the
team is what a user setting the variable gets. More threads than cores (ranks x threads
above the host's cores) oversubscribes them: the bench runs it, the header says so.
--json writes {"meta", "rows", "summary"} (pycomm.tools.results_schema); a row per
(collective, size) with t<N>_us, t<N>_spread and t<N>_speedup per team size.
"""
from __future__ import annotations

import os
import statistics

from harness import driver  # (harness puts pycomm on sys.path)
from pycomm.torch_compat import all_gather_single, reduce_scatter_single
from harness.sizes import check_size_options, human, sweep
from harness.timing import per_call_median, summarize
from harness.world import World

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def _group(dist, threads):
    os.environ["PYCOMM_THREADS"] = str(threads)
    try:
        return dist.new_group(backend="pycomm")
    finally:
        del os.environ["PYCOMM_THREADS"]


def _call(dist, torch, name, group, count, world):
    """(fn that runs collective `name` on `count` float32 elements a rank, its output)."""
    if name == "all_reduce":
        t = torch.zeros(count)
        return (lambda: dist.all_reduce(t, group=group)), t
    if name == "all_gather":
        inp, out = torch.zeros(count), torch.zeros(count * world)
        return (lambda: all_gather_single(out, inp, group=group)), out
    inp, out = torch.zeros(count * world), torch.zeros(count)
    return (lambda: reduce_scatter_single(out, inp, group=group)), out


def _check(dist, torch, name, group, count, rank, world):
    """(elements that differ from the exact result, the output) of one call on
    integer-valued inputs (rank + 1 + i % 7: every sum exact in float32)."""
    base = torch.arange(count * (world if name == "reduce_scatter" else 1)) % 7
    x = (base + rank + 1).float()
    if name == "all_reduce":
        dist.all_reduce(x, group=group)
        want = (base * world + world * (world + 1) // 2).float()
        return int((x != want).sum()), x
    if name == "all_gather":
        out = torch.empty(count * world)
        all_gather_single(out, x, group=group)
        want = torch.cat([(base + r + 1).float() for r in range(world)])
        return int((out != want).sum()), out
    out = torch.empty(count)
    reduce_scatter_single(out, x, group=group)
    full = (base * world + world * (world + 1) // 2).float()
    return int((out != full[rank * count:(rank + 1) * count]).sum()), out


def run(args):
    import torch
    import torch.distributed as dist

    import pycomm  # noqa: F401  (registers the backend)

    world = World()
    rank, size = world.rank, world.size
    cores = len(os.sched_getaffinity(0))
    groups = {t: _group(dist, t) for t in args.threads}
    if rank == 0:
        total = size * max(args.threads)
        driver.print_header([
            f"pycomm thread teams: {size} rank(s), teams of {', '.join(map(str, args.threads))} "
            f"thread(s) a rank, float32, sum; {args.rounds} rounds in turns",
            f"this host: {os.cpu_count()} cores, {cores} in this rank's affinity"
            + (f"; {size} ranks x {max(args.threads)} threads = {total} oversubscribes them"
               if total > (os.cpu_count() or 1) else ""),
            "time: us, median of rounds of the slowest rank's median call; +-: spread of the "
            "rounds, %; xN: the team of one's time / this team's; #wrong: exact check, summed "
            "over ranks; bitwise: every team's result equals the team of one's",
        ])
    rows, summary = [], []
    for name in args.collectives:
        if rank == 0:
            head = f"{'size':>10} " + " ".join(f"{'t=' + str(t) + ' us':>11} {'+-':>4} {'x':>5}"
                                               for t in args.threads) + "  #wrong bitwise"
            print(f"## {name}\n{head}", flush=True)
        for nbytes in sweep(args.minbytes, args.maxbytes, args.stepfactor):
            count = max(1, nbytes // 4 // (size if name != "all_reduce" else 1))
            wrong, outs = 0, {}
            for t, g in groups.items():
                bad, outs[t] = _check(dist, torch, name, g, count, rank, size)
                wrong += bad
            same = all(torch.equal(outs[t], outs[args.threads[0]]) for t in args.threads)
            wrong = int(world.sum_over_ranks([wrong])[0])
            same = world.sum_over_ranks([0.0 if same else 1.0])[0] == 0
            calls = {t: _call(dist, torch, name, g, count, size)[0] for t, g in groups.items()}
            per_round = {t: [] for t in args.threads}
            for _ in range(args.rounds):
                for t in args.threads:
                    per_round[t].append(per_call_median(
                        calls[t], args.min_time / args.rounds / len(args.threads),
                        args.min_iters, args.max_iters, args.warmup,
                        agree=world.from_rank0, slowest=lambda s: world.max_over_ranks([s])[0]))
            row = dict(collective=name, size=count * 4 * (size if name != "all_reduce" else 1),
                       count=count, world_size=size, dtype="float32", op="sum", wrong=wrong,
                       bitwise_equal=same)
            one = statistics.median(per_round[args.threads[0]])
            cells = []
            for t in args.threads:
                med, spread = summarize(per_round[t])
                row.update({f"t{t}_us": med * 1e6, f"t{t}_spread": spread,
                            f"t{t}_rounds_us": [s * 1e6 for s in per_round[t]],
                            f"t{t}_speedup": one / med if med > 0 else None})
                cells.append(f"{med * 1e6:11.1f} {spread * 100:4.0f} {one / med:5.2f}")
            rows.append(row)
            if rank == 0:
                print(f"{human(row['size']):>10} " + " ".join(cells)
                      + f"  {wrong:6d} {'yes' if same else 'NO':>7}", flush=True)
        best = max(args.threads, key=lambda t: statistics.median(
            [r[f"t{t}_speedup"] for r in rows if r["collective"] == name]))
        mine = [r for r in rows if r["collective"] == name]
        line = (f"{name}: largest speed-up " + ", ".join(
            f"{human(r['size'])} x{r[f't{best}_speedup']:.2f} (t={best})" for r in mine[-2:])
            + f"; #wrong {sum(r['wrong'] for r in mine)}; bitwise equal across teams: "
            + ("yes" if all(r["bitwise_equal"] for r in mine) else "NO"))
        summary.append(dict(collective=name, line=line))
        if rank == 0:
            print(f"# {line}\n", flush=True)
    for g in groups.values():
        dist.destroy_process_group(g)
    if rank == 0:
        driver.report(args, "summary", summary, rows,
                      dict(bench="team_perf", world_size=size, threads=args.threads, cores=cores))
    return None


def parse_args(argv=None):
    p = driver.rank_sweep_parser(__doc__, ranks=2)
    p.add_argument("--threads", default="1,2", metavar="N[,N...]",
                   help="team sizes to compare; the first is the reference of xN")
    p.add_argument("--collective", default="all_reduce", metavar="NAME[,NAME...]",
                   help=f"of {', '.join(COLLECTIVES)}; all: every one")
    driver.add_sweep_options(p, "size and team")
    args = p.parse_args(argv)
    check_size_options(p, args)
    args.collectives = driver.chosen_names(p, "collective", args.collective, COLLECTIVES)
    try:
        args.threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        p.error(f"--threads: expected a comma list of counts, got {args.threads!r}")
    if not args.threads or min(args.threads) < 1 or len(set(args.threads)) != len(args.threads):
        p.error(f"--threads: expected distinct counts of 1 or more, got {args.threads}")
    driver.check_sweep_options(p, args)
    return args


if __name__ == "__main__":
    driver.main(parse_args, run)
