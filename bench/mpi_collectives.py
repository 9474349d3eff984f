#!/usr/bin/env python
"""Open MPI's column of bench/collectives_perf.py: the same collectives and sizes with
mpi4py on numpy buffers, under mpirun.

    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \\
        python bench/mpi_collectives.py --plan plan.json --out mpi.json

collectives_perf.py writes the plan (dtype, op, timing budget, and per item the collective
with its element counts) and merges the medians this writes. The calls, the timing and the
check are bench/harness's (peers/mpi.py): each call timed on its own, a rank's median, the
slowest rank's median per round; #wrong on the harness's integer-valued pattern, summed
over the ranks (for Reduce, the root's).
"""
from __future__ import annotations

import argparse
import json

from harness.peers import mpi


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="JSON written by collectives_perf.py")
    p.add_argument("--out", required=True, help="where rank 0 writes the results (JSON)")
    args = p.parse_args(argv)
    with open(args.plan) as f:
        plan = json.load(f)
    out = mpi.serve(plan)
    if out["meta"]:  # rank 0's
        with open(args.out, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
