#!/usr/bin/env python3
"""Writes the generated blocks of docs/coverage.md: the route every collective takes, from
pycomm's own routing table (csrc/core/routing.h, read through pycomm.routing), and the counts
of the case-by-case comparison with gloo and of PyTorch's suite, from the records in
bench/results/coverage/ (compare_with_gloo_*ranks.json, torch_suite_*ranks.json).

    scripts/coverage_page.py                    rewrite docs/coverage.md's blocks
    scripts/coverage_page.py --check            exit 1 if the page is not what this script writes
    scripts/coverage_page.py --record-gloo 2    run the comparison with gloo on 2 ranks (minutes)
                                                and record its counts in bench/results/coverage/
    scripts/coverage_page.py --record-suite 3   run PyTorch's suite on gloo and pycomm at 3 ranks
                                                and record its summary in bench/results/coverage/
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "coverage.md")
RESULTS = os.path.join(ROOT, "bench", "results", "coverage")  # beside, not among, the bench records

# The message sizes the route table shows: a latency-bound one and a bandwidth-bound one.
SMALL, LARGE = 8, 16 << 20
# The groups the table shows: 4 ranks on one host, and 2 hosts of 2 ranks (of 2 and 3 ranks
# where the rank counts differ).
LOCAL = 4

# The comparison's classes, in the order the page lists them, with what each means.
CLASSES = {
    "agree": "both give the right result, bit for bit",
    "gloo wrong": "gloo's result differs from the right one; pycomm's is right",
    "gloo refuses": "gloo raises; pycomm gives the right result",
    "both refuse": "both raise (an op the dtype has no arithmetic for, or torch's own refusal)",
    "pycomm refuses": "pycomm raises where gloo serves (target: 0)",
    "differ": "pycomm's result is not the right one (target: 0)",
    "unclear refusal": "both raise, pycomm with another error type (target: 0)",
}


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes} B"


def _cell(routes: Sequence) -> str:
    """One cell: gloo, or pycomm's algorithm at the small and the large size."""
    if all(r.algorithm == "gloo" for r in routes):
        return "gloo"
    names = [f"`{r.algorithm}`" for r in routes]
    if len(set(names)) == 1:
        return names[0]
    return " · ".join(f"{n} at {_size(s)}" for n, s in zip(names, (SMALL, LARGE)))


def routes_block() -> List[str]:
    # The defaults, not this shell's overrides: the page is the same wherever it is written.
    saved = {n: v for n, v in os.environ.items() if n.startswith("PYCOMM_")}
    for name in saved:
        del os.environ[name]
    try:
        return _routes()
    finally:
        os.environ.update(saved)


def _routes() -> List[str]:
    from pycomm import routing  # the runtime: the table is the backend's own

    columns: Dict[str, Callable[[str, int], object]] = {
        "one host, CPU": lambda c, n: routing.route(c, local_size=LOCAL, count=n // 4),
        "one host, CPU, single copy": lambda c, n: routing.route(c, local_size=LOCAL, count=n // 4,
                                                                 single_copy=True),
        "2 hosts, equal rank counts": lambda c, n: routing.route(c, hosts=2, local_size=2,
                                                                 count=n // 4),
        "2 hosts, unequal rank counts": lambda c, n: routing.route(c, hosts=2, local_size=2,
                                                                   uniform=False, count=n // 4),
        "CUDA tensors, one host": lambda c, n: routing.route(c, local_size=LOCAL, count=n // 4,
                                                             cuda=True),
        "sparse tensors": lambda c, n: routing.route(c, local_size=LOCAL, count=n // 4,
                                                     sparse=True),
    }
    lines = ["| collective | " + " | ".join(columns) + " |",
             "|---" * (len(columns) + 1) + "|"]
    for collective in routing.COLLECTIVES:
        cells = [_cell([route(collective, n) for n in (SMALL, LARGE)]) for route in columns.values()]
        lines.append(f"| `{collective}` | " + " | ".join(cells) + " |")
    lines += ["", "The algorithms:", ""]
    used = sorted({a for a in routing.ALGORITHMS if a in routing.DESCRIPTIONS})
    lines += [f"- `{a}`: {routing.DESCRIPTIONS[a]}" for a in used]
    return lines


def _records(pattern: str) -> List[str]:
    return sorted(glob.glob(os.path.join(RESULTS, pattern)))


def _made_by(meta: dict) -> str:
    return f"Made by `{meta['command']}` on torch {meta['torch']}, {meta['date']}."


def gloo_block() -> List[str]:
    lines: List[str] = []
    for path in _records("compare_with_gloo_*ranks.json"):
        with open(path) as f:
            record = json.load(f)
        meta, counts = record["meta"], record["classes"]
        total = sum(counts.values())
        lines += [f"**{meta['ranks']} ranks**, {total:,} cases:", "",
                  "| class | cases | meaning |", "|---|---:|---|"]
        lines += [f"| {c} | {counts.get(c, 0):,} | {what} |" for c, what in CLASSES.items()]
        lines += ["", _made_by(meta), ""]
    return lines[:-1] if lines else ["(no record in bench/results/coverage yet)"]


def suite_block() -> List[str]:
    lines: List[str] = []
    for path in _records("torch_suite_*ranks.json"):
        with open(path) as f:
            record = json.load(f)
        meta = record["meta"]
        lines += [f"- {record['summary']}. {_made_by(meta)}"]
    return lines or ["(no record in bench/results/coverage yet)"]


def _run_to_json(command: List[str]) -> object:
    """Runs one of the suite's scripts with `--json` into a temporary file and reads it back."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        done = subprocess.run([*command, "--json", out], cwd=ROOT)
        if not os.path.exists(out):
            raise SystemExit(f"{' '.join(command)} wrote no record (exit status {done.returncode})")
        with open(out) as f:
            return json.load(f)


def _meta(command: List[str], ranks: int) -> dict:
    import torch

    return {"command": " ".join(command), "torch": torch.__version__, "ranks": ranks,
            "date": time.strftime("%Y-%m-%d")}


def record_gloo(ranks: int) -> str:
    command = ["torchrun", "--nproc_per_node", str(ranks), "tests/scripts/compare_with_gloo.py"]
    cases = _run_to_json(command)
    counts: Dict[str, int] = {}
    for case in cases:
        counts[case["class"]] = counts.get(case["class"], 0) + 1
    unknown = set(counts) - set(CLASSES)
    if unknown:
        raise SystemExit(f"the comparison has classes this page does not know: {sorted(unknown)}")
    path = os.path.join(RESULTS, f"compare_with_gloo_{ranks}ranks.json")
    _write(path, {"meta": _meta(command, ranks), "classes": counts})
    return path


def record_suite(ranks: int) -> str:
    command = [sys.executable, "tests/torch_suite/runner.py", "--backend", "both",
               "--world", str(ranks)]
    report = _run_to_json(command)
    if "summary" not in report:
        raise SystemExit("the suite's run made no summary (did both backends run?)")
    meta = _meta(["python3", *command[1:]], ranks)
    path = os.path.join(RESULTS, f"torch_suite_{ranks}ranks.json")
    _write(path, {"meta": meta, "summary": report["summary"]})
    return path


def _write(path: str, record: dict) -> None:
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)}")


BLOCKS = {"routes": routes_block, "against gloo": gloo_block, "torch suite": suite_block}


def _markers(name: str):
    return (f"<!-- {name}: written by scripts/coverage_page.py; do not edit -->",
            f"<!-- end of {name} -->")


def render(page: str) -> str:
    for name, block in BLOCKS.items():
        begin, end = _markers(name)
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), flags=re.S)
        if not pattern.search(page):
            raise SystemExit(f"{PAGE}: no block '{begin}' ... '{end}'")
        body = "\n".join([begin, *block(), end])
        page = pattern.sub(lambda _: body, page)
    return page


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if docs/coverage.md is not what this script writes")
    ap.add_argument("--record-gloo", type=int, metavar="RANKS",
                    help="run tests/scripts/compare_with_gloo.py on RANKS ranks and record its counts")
    ap.add_argument("--record-suite", type=int, metavar="RANKS",
                    help="run PyTorch's suite on gloo and pycomm and record its summary")
    a = ap.parse_args(argv)
    if a.record_gloo:
        record_gloo(a.record_gloo)
    if a.record_suite:
        record_suite(a.record_suite)
    with open(PAGE) as f:
        old = f.read()
    new = render(old)
    if a.check:
        if new != old:
            print(f"{PAGE} is not current: run scripts/coverage_page.py", file=sys.stderr)
            return 1
        return 0
    if new != old:
        with open(PAGE, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
