#!/usr/bin/env python
"""Two builds of pycomm measured by one bench, in turns: did a change cost speed?

    python bench/ab_builds.py --before ../old-checkout --after . --rounds 4 -- \\
        bench/collectives_perf.py --collective all_reduce -b 8 -e 16M -f 16 --no-mpi

Each round runs the bench (everything after --, a script of this checkout) once with each
build's pycomm first on PYTHONPATH, the order alternating from round to round, so that
both see the same drift of a shared host. Each run writes its JSON; the table gives, per
row of the bench (collective or pattern, size) and pycomm column (`pycomm_*_us`), the
median over the rounds of each build's time, the rounds' range, and after / before.
A build is a checkout whose extension was built in place (`python3 setup.py build_ext
--inplace`). The JSON of the comparison goes to --json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run_once(build: str, bench: list, out: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(build) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable] + bench + ["--json", out]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} with {build}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    with open(out) as f:
        return json.load(f)


def times(result: dict) -> dict:
    """(row name, column) -> microseconds, for every pycomm column of every row."""
    out = {}
    for row in result["rows"]:
        name = f"{row.get('collective') or row.get('pattern') or row.get('call')} {row['size']}"
        for key, value in row.items():
            if key.startswith("pycomm") and key.endswith("_us") and isinstance(value, (int, float)):
                out[(name, key[:-3])] = value
    return out


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the checkout of the build before")
    ap.add_argument("--after", default=".", help="the checkout of the build after")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", default=os.path.join("bench", "out", "ab_builds.json"))
    args = ap.parse_args(argv[:split])
    bench = argv[split + 1:]
    if not bench:
        ap.error("give the bench after --")
    runs = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for which in order:
                build = args.before if which == "before" else args.after
                result = run_once(build, bench, os.path.join(tmp, f"{which}{r}.json"))
                runs[which].append(times(result))
                print(f"round {r + 1}/{args.rounds}: {which} done", flush=True)
    rows = []
    for key in runs["after"][0]:
        b = [t[key] for t in runs["before"] if key in t]
        a = [t[key] for t in runs["after"] if key in t]
        if not b or not a:
            continue
        rows.append({"row": key[0], "column": key[1], "before_us": statistics.median(b),
                     "before_range": [min(b), max(b)], "after_us": statistics.median(a),
                     "after_range": [min(a), max(a)],
                     "ratio": statistics.median(a) / statistics.median(b)})
    print(f"{'row':<24} {'column':<16} {'before µs (range)':>26} {'after µs (range)':>26} {'after/before':>12}")
    for x in rows:
        fmt = lambda m, rg: f"{m:.2f} ({rg[0]:.2f}-{rg[1]:.2f})"  # noqa: E731
        print(f"{x['row']:<24} {x['column']:<16} {fmt(x['before_us'], x['before_range']):>26} "
              f"{fmt(x['after_us'], x['after_range']):>26} {x['ratio']:>12.3f}")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"bench": bench, "rounds": args.rounds, "rows": rows}, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
