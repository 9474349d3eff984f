#!/usr/bin/env python
"""Open MPI's column of bench/p2p_perf.py: the same point-to-point patterns and sizes with
mpi4py on numpy buffers, under mpirun.

    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \\
        python bench/mpi_p2p.py --plan plan.json --out mpi.json

p2p_perf.py writes the plan (dtype, timing budget, and per item the pattern with its count,
window and check window) and merges what this writes. The calls, the timing and the check
are bench/harness's (p2p.py, peers/mpi_p2p.py).
"""
from __future__ import annotations

import argparse
import json

from harness.peers import mpi_p2p


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="JSON written by p2p_perf.py")
    p.add_argument("--out", required=True, help="where rank 0 writes the results (JSON)")
    args = p.parse_args(argv)
    with open(args.plan) as f:
        plan = json.load(f)
    out = mpi_p2p.serve(plan)
    if out["meta"]:  # rank 0's
        with open(args.out, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
