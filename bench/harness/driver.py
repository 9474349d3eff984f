"""The skeleton every driver under bench/ shares: start the ranks, print the header lines,
sweep the items (collectives, patterns) size by size into one table each, then the summary
and the JSON file. A driver keeps only what is its own: its options, its peers, the row of
one measurement and the summary of one item."""
from __future__ import annotations

import argparse
import os
import sys

from pycomm.tools import results_schema as schema

from .launch import launch
from .sizes import add_size_options


def rank_sweep_parser(doc: str, ranks: int):
    """The parser of a sweep of sizes over ranks it spawns: the module doc's first paragraph
    as description and the rest as epilog, the size options and --nproc (default `ranks`)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=doc.split("\n\n", 1)[1])
    add_size_options(p, "")
    p.add_argument("--nproc", "--ranks", type=int, default=ranks, metavar="RANKS",
                   help="ranks to spawn (ignored under torchrun)")
    return p


def add_sweep_options(p, per: str):
    """The timing options every sweep takes (harness/sweep.py), Open MPI's and --json;
    `per`: what --min-time's seconds are per ("size and peer")."""
    p.add_argument("--min-time", type=float, default=0.3, metavar="SECONDS",
                   help=f"seconds of calls per {per}, over all rounds")
    p.add_argument("--rounds", type=int, default=3, metavar="N",
                   help="times each peer is measured per size, in turns")
    p.add_argument("--min-iters", type=int, default=5, metavar="CALLS",
                   help="calls per measurement, at least")
    p.add_argument("--max-iters", type=int, default=20000, metavar="CALLS",
                   help="calls per measurement, at most")
    p.add_argument("-w", "--warmup", type=int, default=5, metavar="CALLS",
                   help="untimed calls before each measurement")
    p.add_argument("--no-mpi", action="store_true", help="skip the Open MPI column")
    p.add_argument("--mpi-timeout", type=float, default=3600, metavar="SECONDS",
                   help="seconds Open MPI's own mpirun launch may take, and at most the "
                        "bench's ranks under mpirun to come up (180 at most)")
    add_json_option(p)


def check_sweep_options(p, args):
    """Refuses, through the parser, sweep options add_sweep_options took but no sweep can
    run with."""
    if args.rounds < 1 or args.min_iters < 1:
        p.error("--rounds and --min-iters must be >= 1")


def add_json_option(p):
    p.add_argument("--json", metavar="PATH", help="write the rows (and a summary) to this file")


def chosen_names(p, option: str, text: str, known) -> list:
    """The items a comma list names ("all": every one of `known`, in its order), each once;
    an unknown one is refused through the parser, naming --option."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        names = list(known)
    bad = [n for n in names if n not in known]
    if bad or not names:
        p.error(f"--{option}: unknown {', '.join(bad) or '(none)'}; choose from "
                f"{', '.join(known)}")
    return list(dict.fromkeys(names))


# The command as the user typed it, for the results file: ranks that mpirun starts run the
# script by its absolute path, and would record that.
COMMAND_ENV = "PYCOMM_BENCH_COMMAND"


def main(parse_args, run, argv=None, backend: str = "gloo", mpi_in_turns: bool = False):
    """A driver's command: parse its options, then run(args) on --nproc ranks (torchrun's
    ranks when it started us). mpi_in_turns (a driver with an Open MPI column, unless
    --no-mpi): the ranks are started by mpirun where it and mpi4py allow, so that Open MPI
    is timed in the same processes (harness.peers.mpi.side), else spawned as before."""
    args = parse_args(argv)
    os.environ.setdefault(COMMAND_ENV, schema.command_line(
        None if argv is None else [sys.argv[0], *map(str, argv)]))
    jointly = None
    if mpi_in_turns and not args.no_mpi:
        from .peers import mpi

        script = os.path.abspath(sys.argv[0])
        jointly = mpi.jointly([script, *(sys.argv[1:] if argv is None else map(str, argv))],
                              min(args.mpi_timeout, mpi.JOINT_START_S))
    launch(run, args, args.nproc, backend, jointly)


def print_header(lines):
    """Rank 0's header: each line after '# '."""
    for line in lines:
        print(f"# {line}")
    sys.stdout.flush()


def sweep_tables(world, names, sizes, *, measure, table_of, title_of, row_of, summary_of, peers):
    """For each item name: its table, a row per size (measure(name, size) -> row_of(name,
    measured)), the peers it dropped and summary_of(name, rows) (a dict with a "line").
    Rank 0 prints as the rows come. Returns (rows, summaries)."""
    rows, summary = [], []
    for name in names:
        table = table_of(name)
        if world.rank == 0:
            print(title_of(name))
            print(table.header(), flush=True)
        mine = []
        for size in sizes:
            mine.append(row_of(name, measure(name, size)))
            if world.rank == 0:
                print(table.row(mine[-1]), flush=True)
        rows += mine
        summary.append(summary_of(name, mine))
        if world.rank == 0:
            for p in peers:
                if name in p.failed:
                    print(f"# {p.label} dropped for {name}: {p.failed[name]}")
            print(f"# {summary[-1]['line']}\n", flush=True)
    return rows, summary


def write_json(path, rows, meta=None, summary=None):
    """The results file (pycomm.tools.results_schema), where --json names one."""
    if path:
        schema.write(path, rows, meta, summary, command=os.environ.get(COMMAND_ENV))
        print(f"# wrote {path}")


def report(args, head: str, summary, rows, meta):
    """Rank 0's closing lines: the summary's head, each item's line, then the JSON file."""
    print(f"# {head}")
    for s in summary:
        print(f"#   {s['line'] if isinstance(s, dict) else s}")
    write_json(args.json, rows, meta, summary)
    sys.stdout.flush()
