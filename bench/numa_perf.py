"""Ranks pinned to NUMA nodes: the two-level all-reduce (reduce in each node, exchange
between nodes, gather back) against the flat ring, and gloo, side by side in one run, in turns.

    python3 bench/numa_perf.py --nproc 8 -b 256K -e 64M
    python3 bench/numa_perf.py --nproc 4 --pose 2     # a host of one node: two posed ones

Each rank pins itself to a node before any group is made: ranks in blocks, node i taking
ranks i*R/N .. (i+1)*R/N - 1 of the host's first N nodes (--nodes, default all, at most one
per two ranks: a node of one rank runs the ring). A host with fewer nodes than asked is
posed as --pose nodes over its CPUs (PYCOMM_TOPOLOGY), split evenly: the plan and its
routing run as on the real host, but memory has one node, so the table then shows only the
two-level's cost (its extra handshakes), not what it saves on the link between sockets.

Per size, every column is timed in turns, --rounds times: a round's time is the slowest
rank's median call, the reported time the median of the rounds and `+-` their spread
((slowest - fastest) / median, %). Columns: gloo (dist.all_reduce on a gloo group), ring
and two_level (pycomm.all_reduce with that algorithm), auto (dist.all_reduce on a pycomm
group: what the routing table picks, named in `took`). ring/2lvl is the ring's time over
the two-level's. Before the timings each pycomm column reduces integer-valued inputs and
every rank checks the exact result (#wrong, summed over ranks).
--json writes {"meta", "rows", "summary"} (pycomm.tools.results_schema).
"""
from __future__ import annotations

import os

from harness import driver  # (harness puts pycomm on sys.path)
from harness.sizes import check_size_options, human, sweep
from harness.timing import per_call_median, summarize
from harness.world import World

COLUMNS = ("gloo", "ring", "two_level", "auto")
TOOK = ("two_level", "ring", "direct")  # what auto may take, in the order they are compared


def pin_plan(size: int, wanted: int, pose: int):
    """(each node's CPUs, the node of each rank, the PYCOMM_TOPOLOGY posed or '')."""
    from pycomm import host_cpus

    layout = host_cpus.numa_layout()
    nodes = [cpus for _, cpus in sorted(layout.nodes.items())]
    posed = ""
    if len(nodes) < 2:
        cpus = sorted(os.sched_getaffinity(0))
        n = max(2, pose)
        nodes = [cpus[i * len(cpus) // n:(i + 1) * len(cpus) // n] for i in range(n)]
        posed = ";".join(",".join(map(str, c)) for c in nodes)
    n = min(len(nodes), wanted or len(nodes), max(1, size // 2))
    return nodes[:n], [r * n // size for r in range(size)], posed


def run(args):
    import torch
    import torch.distributed as dist

    import pycomm
    from pycomm import host_cpus
    from pycomm.config import setting

    world = World()
    rank, size = world.rank, world.size
    nodes, node_of, posed = pin_plan(size, args.nodes, args.pose)
    if posed:
        os.environ["PYCOMM_TOPOLOGY"] = posed
    os.sched_setaffinity(0, nodes[node_of[rank]])
    groups = {"gloo": dist.new_group(backend="gloo"), "pycomm": dist.new_group(backend="pycomm")}
    pycomm.init(groups["pycomm"])  # pycomm.all_reduce's communicator, made while pinned
    if rank == 0:
        where = (f"posed as {len(nodes)} nodes over one (PYCOMM_TOPOLOGY={posed}): no memory "
                 f"effect, the two-level's cost alone" if posed else
                 f"{len(nodes)} real NUMA nodes")
        driver.print_header([
            f"pycomm NUMA all-reduce: {size} ranks pinned to {where}; ranks by node "
            f"{node_of}; float32 sum; {args.rounds} rounds in turns; PYCOMM_TWO_LEVEL="
            f"{setting('two_level')}",
            f"this host: {os.cpu_count()} cores; rank 0 pinned to CPUs "
            f"{host_cpus.placement()['cpus']}",
            "time: us, median of rounds of the slowest rank's median call; +-: spread of the "
            "rounds, %; ring/2lvl: the ring's time over the two-level's; took: the algorithm "
            "auto's result equals bitwise; #wrong: exact check, summed over ranks",
        ])
        print(f"{'size':>10} " + " ".join(f"{c + ' us':>12} {'+-':>4}" for c in COLUMNS)
              + f" {'ring/2lvl':>9} {'took':>10} {'#wrong':>6}", flush=True)
    rows = []
    for nbytes in sweep(args.minbytes, args.maxbytes, args.stepfactor):
        count = max(1, nbytes // 4)

        def call(column, x):
            if column == "gloo":
                return lambda: dist.all_reduce(x, group=groups["gloo"])
            if column == "auto":
                return lambda: dist.all_reduce(x, group=groups["pycomm"])
            return lambda: pycomm.all_reduce(x, group=groups["pycomm"], algorithm=column)

        # Exact check on integer-valued inputs, and which algorithm auto took: the one
        # whose result on random inputs it equals bitwise (each adds in its own order).
        base = (torch.arange(count) % 7).float()
        wrong = 0
        for column in COLUMNS[1:]:
            x = base + rank + 1
            call(column, x)()
            wrong += int((x != base * size + size * (size + 1) // 2).sum())
        wrong = int(world.sum_over_ranks([wrong])[0])
        noise = torch.randn(count, generator=torch.Generator().manual_seed(rank))
        auto = noise.clone()
        call("auto", auto)()
        code = len(TOOK)
        for i, algorithm in enumerate(TOOK):
            y = noise.clone()
            pycomm.all_reduce(y, group=groups["pycomm"], algorithm=algorithm)
            if torch.equal(y, auto):
                code = i
                break
        lo, hi = (int(v) for v in world.max_over_ranks([-code, code]))
        took = (TOOK + ("none",))[hi] if -lo == hi else "mixed"
        tensors = {c: torch.zeros(count) for c in COLUMNS}
        calls = {c: call(c, tensors[c]) for c in COLUMNS}
        per_round = {c: [] for c in COLUMNS}
        for _ in range(args.rounds):
            for c in COLUMNS:
                per_round[c].append(per_call_median(
                    calls[c], args.min_time / args.rounds / len(COLUMNS), args.min_iters,
                    args.max_iters, args.warmup, agree=world.from_rank0,
                    slowest=lambda s: world.max_over_ranks([s])[0]))
        row = dict(collective="all_reduce", size=count * 4, count=count, world_size=size,
                   dtype="float32", op="sum", wrong=wrong, took=took)
        cells = []
        for c in COLUMNS:
            med, spread = summarize(per_round[c])
            row.update({f"{c}_us": med * 1e6, f"{c}_spread": spread,
                        f"{c}_rounds_us": [s * 1e6 for s in per_round[c]]})
            cells.append(f"{med * 1e6:12.1f} {spread * 100:4.0f}")
        row["ring_over_two_level"] = row["ring_us"] / row["two_level_us"]
        rows.append(row)
        if rank == 0:
            print(f"{human(row['size']):>10} " + " ".join(cells)
                  + f" {row['ring_over_two_level']:9.2f} {row['took']:>10} {wrong:6d}", flush=True)
    large = rows[-1]
    line = (f"{size} ranks on {len(nodes)} {'posed ' if posed else ''}nodes, "
            f"{human(large['size'])}: two_level {large['two_level_us']:.0f} us, ring "
            f"{large['ring_us']:.0f} us (ring/2lvl {large['ring_over_two_level']:.2f}), gloo "
            f"{large['gloo_us']:.0f} us; auto took {large['took']}; "
            f"#wrong {sum(r['wrong'] for r in rows)}")
    if rank == 0:
        print(f"# {line}", flush=True)
    pycomm.destroy(groups["pycomm"])
    for grp in groups.values():
        dist.destroy_process_group(grp)
    if rank == 0:
        driver.report(args, "summary", [dict(collective="all_reduce", line=line)], rows,
                      dict(bench="numa_perf", world_size=size, nodes=len(nodes), posed=posed,
                           node_of=node_of))
    return None


def parse_args(argv=None):
    p = driver.rank_sweep_parser(__doc__, ranks=4)
    p.add_argument("--nodes", type=int, default=0, help="nodes to use (0: every node)")
    p.add_argument("--pose", type=int, default=2,
                   help="on a host of one node: pose this many (PYCOMM_TOPOLOGY)")
    driver.add_sweep_options(p, "size and column")
    args = p.parse_args(argv)
    check_size_options(p, args)
    if args.nodes < 0 or args.pose < 2:
        p.error(f"--nodes: expected 0 or more, --pose: 2 or more; got {args.nodes}, {args.pose}")
    driver.check_sweep_options(p, args)
    return args


if __name__ == "__main__":
    driver.main(parse_args, run)
