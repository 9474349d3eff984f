#!/usr/bin/env python
"""Open MPI's column of bench/collectives_perf.py and bench/p2p_perf.py: the same collectives
or point-to-point patterns, at the same sizes, with mpi4py on numpy buffers, under mpirun.

    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \\
        python bench/mpi_worker.py --plan plan.json --out mpi.json

This is Open MPI's own launch, the fallback where the bench's ranks are not MPI ranks
themselves (harness/peers/mpi.py; where they are, Open MPI is timed in them, in turns with
the other peers). The driver writes the plan (its kind, dtype, timing budget and items) and
merges what rank 0 writes here. The calls, the timing and the check are bench/harness's
(peers/mpi.py for collectives, peers/mpi_p2p.py for point-to-point): each call timed on its
own, a rank's median, the slowest rank's median per round; #wrong on the harness's
integer-valued patterns, summed over the ranks.
"""
from __future__ import annotations

import argparse
import json

from harness.peers import mpi, mpi_p2p

SERVE = {"collectives": mpi.serve, "p2p": mpi_p2p.serve}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="JSON written by the driver")
    p.add_argument("--out", required=True, help="where rank 0 writes the results (JSON)")
    args = p.parse_args(argv)
    with open(args.plan) as f:
        plan = json.load(f)
    out = SERVE[plan["kind"]](plan)
    if out["meta"]:  # rank 0's
        with open(args.out, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
