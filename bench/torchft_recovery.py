#!/usr/bin/env python
"""torchft's recovery on pycomm's process group beside torchft's own gloo groups: the time
from a replica's death (kill -9) and from its hang (SIGSTOP) to the end of the survivor's
failed step (the fault seen) and of its next step committed alone, and the step time of two
replicas training together.

    python bench/torchft_recovery.py                        # 5 repeats, about 5 minutes here
    python bench/torchft_recovery.py --repeats 7 --timeout 10 --json out.json

Each run is examples/torchft_train.py's launcher (a lighthouse, two replica processes of one
rank, a small MLP, gradients through manager.allreduce; the faulty replica kills or stops
itself mid-step, in a quorum with the other), so the bench times what a user's run does; the
step time is the survivor's before the kill. The groups take turns within each repeat
(pycomm, gloo, baby-gloo, then again).
Per group, the median of the repeats and the spread (max - min) / median. A hang costs the
group's timeout (--timeout) on every group: what differs is what follows it. The lighthouse
gives a silent replica 0.5 s to join a quorum and drops it after 1 s without heartbeats.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(HERE)
EXAMPLE = os.path.join(ROOT, "examples", "torchft_train.py")
# This checkout's pycomm, in the replicas too.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}

from harness.table import Column, Table  # noqa: E402
from harness.timing import summarize  # noqa: E402

GROUPS = ("pycomm", "gloo", "baby-gloo")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--timeout", type=float, default=5.0, help="each group's timeout, seconds")
    p.add_argument("--steps", type=int, default=30, help="steps together before the kill (the step time's)")
    p.add_argument("--groups", default=",".join(GROUPS))
    p.add_argument("--run-timeout", type=float, default=300, help="one run's longest, seconds")
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def launch(pg: str, args, *extra) -> list:
    with tempfile.TemporaryDirectory() as out:
        try:
            proc = subprocess.run([sys.executable, EXAMPLE, "--pg", pg, "--timeout", str(args.timeout),
                                   "--out-dir", out, *extra], capture_output=True, text=True,
                                  timeout=args.run_timeout, env=ENV)
        except subprocess.TimeoutExpired:
            print(f"# {pg} {' '.join(extra)}: no end after {args.run_timeout:g} s (counted as '-')", flush=True)
            return None
    if proc.returncode != 0:
        raise RuntimeError(f"{pg} {' '.join(extra)} failed:\n{proc.stderr[-3000:]}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines[-1].get("weights_equal"):
        raise RuntimeError(f"{pg} {' '.join(extra)}: the replicas' weights differ at the end")
    return lines


def after_fault_s(lines, event: str, recovered: bool) -> float:
    """From the fault to the end of the survivor's next step that failed (the fault
    seen), or of its first step committed alone (recovered)."""
    (fault,) = [rec for rec in lines if rec.get("event") == event]
    times = [rec["t"] for rec in lines if rec.get("replica") == 0 and rec["t"] > fault["t"]
             and (rec["committed"] and rec["participants"] == 1 if recovered else not rec["committed"])]
    # None: no step failed (the quorum left the replica out before the survivor's next call).
    return min(times) - fault["t"] if times else None


def step_s(lines) -> float:
    """The survivor's median step before the kill, both replicas in the quorum, the first
    5 steps left out."""
    (fault,) = [rec for rec in lines if rec.get("event") == "kill"]
    steps = [rec["step_s"] for rec in lines if rec.get("replica") == 0 and rec["committed"]
             and rec["participants"] == 2 and rec["step"] > 5 and rec["t"] < fault["t"]]
    return statistics.median(steps)


def measure(args) -> dict:
    groups = args.groups.split(",")
    samples = {g: {k: [] for k in ("kill_seen", "kill", "hang_seen", "hang", "step")} for g in groups}
    for r in range(args.repeats):
        for g in groups:  # in turns
            s = samples[g]
            for fault in ("kill", "hang"):
                lines = launch(g, args, f"--{fault}-at", str(args.steps if fault == "kill" else 4))
                s[f"{fault}_seen"].append(lines and after_fault_s(lines, fault, recovered=False))
                s[fault].append(lines and after_fault_s(lines, fault, recovered=True))
                if fault == "kill":
                    s["step"].append(lines and step_s(lines))
            print(f"# repeat {r + 1}/{args.repeats} {g}: " + json.dumps({k: v[-1] for k, v in s.items()}),
                  flush=True)
    rows = []
    for g in groups:
        row = {"group": g}
        for key, values in samples[g].items():
            row[f"{key}_all"] = values
            values = [v for v in values if v is not None]
            row[key], row[f"{key}_spread"] = summarize(values) if values else (None, None)
        rows.append(row)
    return {"rows": rows, "meta": {"repeats": args.repeats, "timeout_s": args.timeout,
                                   "steps": args.steps}}


TABLE = Table([
    Column("group", 10, "group", align="<"), None,
    Column("kill->error(ms)", 16, "kill_seen", ".0f", 1e3), Column("spread", 7, "kill_seen_spread", ".0%"),
    Column("kill->commit(ms)", 17, "kill", ".0f", 1e3), Column("spread", 7, "kill_spread", ".0%"), None,
    Column("hang->error(s)", 15, "hang_seen", ".2f"), Column("spread", 7, "hang_seen_spread", ".0%"),
    Column("hang->commit(s)", 16, "hang", ".2f"), Column("spread", 7, "hang_spread", ".0%"), None,
    Column("step(ms)", 9, "step", ".2f", 1e3), Column("spread", 7, "step_spread", ".0%"),
])


def main(argv=None):
    args = parse_args(argv)
    result = measure(args)
    print(f"# torchft 2 replicas x 1 rank, timeout {args.timeout:g} s, medians of {args.repeats} "
          f"repeats in turns")
    print(TABLE.header())
    for row in result["rows"]:
        print(TABLE.row(row))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
