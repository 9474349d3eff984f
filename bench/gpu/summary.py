"""The one table of bench/gpu_check.sh: every step's status and time, what was skipped and
why, and the key numbers. gpu_check.sh calls it after every step, so that $OUT holds the
table and the numbers of every step finished so far, whenever the run ends.

    python3 -m bench.gpu.summary OUT_DIR [--raw RAW_DIR]   # from the checkout's root

With --raw, the steps' own outputs in RAW_DIR (NAME.json from the drivers, NAME.log:
the part of the combined log that step NAME wrote) are gathered into OUT_DIR/results.json
first; without, results.json is read. OUT_DIR/steps.tsv has one line per finished step:
name, status, seconds, limit, note. The table goes to stdout and OUT_DIR/table.txt.
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import re
import sys

from ..harness.sizes import human  # standard library only: no torch
from . import targets


def _load_results_schema():
    """pycomm.tools.results_schema, loaded from its file: importing it as pycomm.tools would
    import pycomm and torch, seconds that the table, rebuilt after every step within a few
    seconds, cannot spare. The module is standard library only."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "pycomm", "tools", "results_schema.py")
    spec = importlib.util.spec_from_file_location("results_schema", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


schema = _load_results_schema()

# Sizes the table shows, of those a sweep measured: latency, the middle, bandwidth.
SHOWN_SIZES = (8, 1 << 20, 256 << 20)
# pytest -v lines, and what --collect-only prints.
PYTEST_OUTCOME = re.compile(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", re.M)
# The same under pytest-xdist (-n 1): "[gw0] [ 47%] PASSED tests/x.py::test".
PYTEST_XDIST_OUTCOME = re.compile(
    r"^\[gw\d+\] \[\s*\d+%\] (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (tests/\S+::\S+)", re.M)
PYTEST_COLLECTED = re.compile(r"(\d+) tests? collected")
SANITIZER_ERRORS = re.compile(r"ERROR SUMMARY: (\d+) error")
CTEST_LINE = re.compile(r"\d+% tests passed, \d+ tests failed out of \d+")
# What the threads bench chose so that every rank's blocks are resident at once.
RESIDENT = re.compile(r"^# (\d+ SMs: at most \d+ blocks a rank)", re.M)
# gpu_check.sh records a sanitizer step whose bench exited 3 (an in-kernel wait for a peer
# timed out) as skipped with this reason: the sanitizer ran the ranks one at a time.
SERIALIZED = "skipped: sanitizer serialized"
# The native thread_scaling bench: its heading (buffer size, cores) and one row a team size.
THREAD_SCALING = re.compile(r"^(vector path: .*|(?:memcpy|reduce .*?)\s+\d+\s+[\d.]+\s+\(.*)$", re.M)


# --------------------------------------------------------------------------- gathering

def _log_facts(text):
    """What the table needs from a step's log: its last line, and what a tool printed."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    facts = dict(last_line=lines[-1][:160] if lines else "")
    outcomes = PYTEST_OUTCOME.findall(text) + [(t, o) for o, t in PYTEST_XDIST_OUTCOME.findall(text)]
    if outcomes:
        facts["pytest"] = {name: outcome for name, outcome in outcomes}
    collected = PYTEST_COLLECTED.search(text)
    if collected:
        facts["collected"] = int(collected.group(1))
    errors = SANITIZER_ERRORS.findall(text)
    if errors:
        facts["sanitizer_errors"] = sum(map(int, errors))
    ctest = CTEST_LINE.search(text)
    if ctest:
        facts["ctest"] = ctest.group(0)
    scaling = THREAD_SCALING.findall(text)
    if scaling:
        facts["thread_scaling"] = [" ".join(row.split()) for row in scaling]
    resident = RESIDENT.search(text)
    if resident:
        facts["resident"] = resident.group(1)
    return facts


def gather(out, raw):
    """results.json from RAW_DIR's files: {"steps": [...], NAME: its JSON, "logs": {...}}."""
    results = dict(steps=read_steps(out), logs={})
    for path in sorted(glob.glob(os.path.join(raw, "*.json"))):
        name = os.path.splitext(os.path.basename(path))[0]
        try:
            with open(path) as f:
                results[name] = json.load(f)
        except (OSError, ValueError) as e:  # a step killed while it wrote
            results[name] = dict(unreadable=str(e))
    for path in sorted(glob.glob(os.path.join(raw, "*.log"))):
        with open(path, errors="replace") as f:
            results["logs"][os.path.splitext(os.path.basename(path))[0]] = _log_facts(f.read())
    with open(os.path.join(out, "results.json.tmp"), "w") as f:
        json.dump(results, f, indent=1)
    os.replace(os.path.join(out, "results.json.tmp"), os.path.join(out, "results.json"))
    return results


def read_steps(out):
    path = os.path.join(out, "steps.tsv")
    if not os.path.exists(path):
        return []
    keys = ("name", "status", "seconds", "limit", "note")
    with open(path) as f:
        return [dict(zip(keys, line.rstrip("\n").split("\t"))) for line in f if line.strip()]


# --------------------------------------------------------------------------- the lines

def _dry(name, data):
    """A driver's dry run (bench/dry_run.py): whether it parsed and imported, and its plan."""
    missing = data.get("missing")
    plan = "; ".join(f"{k} {v}" for k, v in data.get("plan", {}).items())
    return [f"{name}: dry run: arguments parse, imports "
            + (f"MISSING {'; '.join(missing)}" if missing else "ok") + (f"; {plan}" if plan else "")]


def machine_lines(m, t=None):
    """The preflight's facts (m: no torch) and torch's (t), either possibly cut short."""
    t = t or {}
    gpus = m.get("gpus_smi") or [{}]
    g = gpus[0]
    lines = [f"machine: {g.get('name', 'no GPU')}, driver {g.get('driver_version', '-')}, compute "
             f"mode {g.get('compute_mode', '-')}, MIG {g.get('mig.mode.current', '-')}; torch "
             f"{t.get('torch', '-')} (GCC {t.get('torch_gcc', '-')}), CUDA {t.get('torch_cuda', '-')}, "
             f"NCCL {t.get('nccl', '-')}; nvcc {m.get('nvcc') or 'missing'}; c++ "
             f"{m.get('cxx') or 'missing'}, {m.get('libc', '-')}; python {m.get('python')}; carried "
             f"NCCL {m.get('nccl_carried', '-')}"
             + ("" if m.get("python_headers_present", True)
                else f" WITHOUT its headers ({m.get('python_headers')})"),
             "missing: " + (", ".join([k for k, v in m.get("tools", {}).items() if not v]
                                      + [k for k, v in m.get("packages", {}).items() if not v])
                            or "nothing")]
    for what, facts in (("preflight", m), ("torch_facts", t)):
        if facts.get("unfinished"):
            lines.append(f"{what} was cut short while waiting for {facts['unfinished']}")
    if t.get("cuda_error"):
        lines.append(f"CUDA did not start in torch: {t['cuda_error']}")
    return lines


def mps_line(m, steps):
    """Whether the image has MPS's control program, and what became of the daemon."""
    if "nvidia-cuda-mps-control" not in m.get("tools", {}):
        return []
    status = {s["name"]: s["status"] for s in steps}
    present = m["tools"]["nvidia-cuda-mps-control"]
    return ["MPS: nvidia-cuda-mps-control " + ("is" if present else "is NOT") + " on the image"
            + "".join(f"; {name} {status[name]}" for name in ("mps_start", "mps_stop")
                      if name in status)]


def threads_lines(name, data, facts):
    """Ranks as threads on one GPU: each algorithm at a few sizes, against the copy
    floor of the same run, the empty-launch latency and the blocks the launcher chose."""
    rows = data.get("rows", [])
    wrong = sum(r.get("wrong", 0) for r in rows)
    head = (f"{name} ({data.get('ranks')} ranks as threads): #wrong {wrong} over {len(rows)} rows; "
            f"empty launch + sync {data.get('empty_launch_us', 0):.1f} us"
            + (f"; {facts['resident']}" if "resident" in facts else ""))
    biggest = max((r["bytes"] for r in rows), default=None)
    blocks = {r["algorithm"]: r["blocks"] for r in rows if r["bytes"] == biggest}
    if blocks:
        head += "; blocks at the largest size " + ", ".join(f"{a} {b}" for a, b in blocks.items())
    lines = [head]
    for size in SHOWN_SIZES:
        rs = [r for r in rows if r["bytes"] == size]
        if rs:
            lines.append(f"  {human(size):>7}: " + "; ".join(
                f"{r['algorithm']} {r['time_us']:.1f} us ({r['time_us'] / r['floor_us']:.2f}x floor)"
                + (f" busbw {r['busbw_gbs']:.0f} GB/s" if size >= (1 << 20) else "")
                + (f" WRONG {r['wrong']}" if r.get("wrong") else "") for r in rs))
    return lines


def pytest_lines(name, facts):
    if "pytest" not in facts:
        return [f"{name}: {facts['collected']} tests collected"] if "collected" in facts else []
    outcomes = facts["pytest"]
    counts = {}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    bad = [n.split("::", 1)[1] for n, o in outcomes.items() if o in ("FAILED", "ERROR")]
    return [f"{name}: " + ", ".join(f"{v} {k.lower()}" for k, v in sorted(counts.items()))
            + (f"; failed: {', '.join(bad[:4])}" if bad else "")]


def procs_lines(name, data):
    doc = schema.document(data)
    rows, meta = doc["rows"], doc["meta"]
    wrong = sum(r.get("wrong") or 0 for r in rows)  # the copy floor's is None: not checked
    not_run = {}
    for r in rows:
        if "us" not in r:
            not_run.setdefault(r["name"], r.get("why") or "?")
    lines = [f"{name} ({meta.get('world')} processes on {meta.get('gpus')} GPU, NCCL "
             f"{meta.get('nccl', '?')}): #wrong {wrong}"
             + "".join(f"; {peer} not run: {why}" for peer, why in not_run.items())]
    for size in SHOWN_SIZES:
        rs = [r for r in rows if r["bytes"] == size and "us" in r]
        if rs:
            lines.append(f"  {human(size):>7}: " + "; ".join(f"{r['name']} {r['us']:.1f} us" for r in rs))
    return lines


def ddp_grads_lines(name, data):
    doc = schema.document(data)
    meta = doc["meta"]
    return [f"{name} ({meta.get('model')}, {meta.get('world')} ranks on {meta.get('gpus')} GPU, vs "
            f"{meta.get('reference')}): " + "; ".join(
                f"{c['hook']} worst {c['worst']:.2e} (tolerance {c['tolerance']:.2e}) "
                f"{'ok' if c['ok'] else 'FAILED'}" for c in doc["rows"])]


def ddp_lines(name, data):
    records = schema.rows(data)
    stock = next((r for r in records if r["mode"] == "stock" and r.get("available")), None)
    parts = []
    for r in records:
        if r["mode"] == "baseline":
            continue
        if not r.get("available"):
            parts.append(f"{r['mode']} not run ({r.get('reason')})")
            continue
        ratios = ([f"{r['over_no_comm']:.2f}x no-comm"] if r.get("over_no_comm") and r["mode"] != "no-comm"
                  else []) + ([f"{r['step_time_s'] / stock['step_time_s']:.2f}x stock"]
                              if stock and r is not stock else [])
        parts.append(f"{r['mode']} {r['step_time_s'] * 1e3:.1f} ms/step"
                     + (f" ({', '.join(ratios)})" if ratios else ""))
    backend = records[0].get("backend", "?") if records else "?"
    nccl = next((r["nccl"] for r in records if r.get("nccl")), None)
    return [f"{name} (stock backend {backend}{f', NCCL {nccl}' if nccl else ''}): "
            + "; ".join(parts)]


def cpu_lines(name, data):
    return [f"{name}: {s['line']}" for s in schema.document(data)["summary"]]


def teams_lines(name, data):
    """bench/team_perf.py: each size's time per team size and its speed-up over one thread."""
    doc = schema.document(data)
    teams = doc["meta"].get("threads", [])
    lines = []
    for r in doc["rows"]:
        cells = ", ".join(f"t={t} {r[f't{t}_us']:.0f} us (x{r[f't{t}_speedup']:.2f})" for t in teams)
        lines.append(f"{name} {r['collective']} {human(r['size'])}, {r['world_size']} ranks: {cells}; "
                     f"#wrong {r['wrong']}, bitwise equal {'yes' if r['bitwise_equal'] else 'NO'}")
    return lines


def number_lines(results):
    lines = []
    if isinstance(results.get("machine"), dict):
        torch_facts = results.get("torch_facts")
        lines += machine_lines(results["machine"],
                               torch_facts if isinstance(torch_facts, dict) else None)
        lines += mps_line(results["machine"], results.get("steps", []))
    logs = results.get("logs", {})
    for step in results.get("steps", []):
        name = step["name"]
        data, facts = results.get(name), logs.get(name, {})
        try:
            if isinstance(data, dict) and data.get("dry_run"):
                lines += _dry(name, data)
            elif name.startswith("threads_") and data:
                lines += threads_lines(name, data, facts)
            elif name.startswith(("mps_procs_", "mps_symm_")) and data:
                lines += procs_lines(name, data)
            elif name == "ddp_grads" and data:
                lines += ddp_grads_lines(name, data)
            elif name == "ddp_resnet50" and data:
                lines += ddp_lines(name, data)
            elif name == "cpu_threads":
                lines += [f"{name}: {row}" for row in facts.get("thread_scaling", [])]
            elif name == "cpu_teams" and data:
                lines += teams_lines(name, data)
            elif name.startswith("cpu_collectives_") and data:
                lines += cpu_lines(name, data)
            elif name.startswith("ipc_"):
                lines += pytest_lines(name, facts)
            if "sanitizer_errors" in facts:
                lines.append(f"{name}: compute-sanitizer found {facts['sanitizer_errors']} error(s)"
                             + ("; the bench's waits timed out: the sanitizer ran the ranks "
                                "one at a time" if step["status"].startswith(SERIALIZED) else ""))
            if "ctest" in facts:
                lines.append(f"{name}: {facts['ctest']}")
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            lines.append(f"{name}: result not readable ({type(e).__name__}: {e})")
    try:
        lines += targets.lines(results)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        lines.append(f"targets: results not readable ({type(e).__name__}: {e})")
    return lines


def table(results, planned_limit=None):
    steps = results.get("steps", [])
    failed = [s for s in steps if not (s["status"] == "ok" or s["status"].startswith("skipped"))]
    skipped = [s for s in steps if s["status"].startswith("skipped")]
    took = sum(int(s["seconds"]) for s in steps if s["seconds"].isdigit())
    out = [f"# bench/gpu_check.sh: {len(steps)} steps: {len(steps) - len(failed) - len(skipped)} ok, "
           f"{len(skipped)} skipped, {len(failed)} failed; {took} s"
           + (f" of the {planned_limit} s limit" if planned_limit else ""),
           f"{'step':<18} {'status':<26} {'time':>5} {'limit':>5}  note"]
    for s in steps:
        out.append(f"{s['name']:<18} {s['status'][:26]:<26} {s['seconds'] + 's':>5} "
                   f"{s['limit'] + 's':>5}  {s.get('note', '')}")
    logs = results.get("logs", {})
    for s in failed:
        last = logs.get(s["name"], {}).get("last_line")
        if last:
            out.append(f"# {s['name']} ended with: {last}")
    reasons = {}
    for s in skipped:
        reasons.setdefault(s["status"], []).append(s["name"])
    for why, names in reasons.items():
        out.append(f"# {why}: {', '.join(names)}")
    return out + number_lines(results)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", default="bench/out/gpu", help="the check's OUT folder")
    p.add_argument("--raw", metavar="DIR", help="gather the steps' own outputs from here first")
    p.add_argument("--limit", type=int, help="the run's total time limit, for the header")
    args = p.parse_args(argv)
    if args.raw:
        results = gather(args.out, args.raw)
    else:
        with open(os.path.join(args.out, "results.json")) as f:
            results = json.load(f)
        results["steps"] = read_steps(args.out)
    text = "\n".join(table(results, args.limit)) + "\n"
    with open(os.path.join(args.out, "table.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
