"""The one table at the end of bench/gpu_check.sh, from the files it wrote.

    python3 bench/gpu_summary.py OUT_DIR

Each line names the file it came from; a step whose file is missing says so.
"""
from __future__ import annotations

import json
import os
import sys


def _load(out, name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _steps(out):
    path = os.path.join(out, "summary.tsv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def threads_lines(out):
    """Ranks as threads on one GPU: each algorithm's median at a few sizes, with
    the latency floor and the device-copy ceiling of the same run."""
    lines = []
    for n in (2, 4, 8):
        data = _load(out, f"threads_{n}.json")
        if data is None:
            lines.append(f"threads x{n}: no result (threads_{n}.txt)")
            continue
        rows = data.get("rows", [])
        by_size = {}
        for r in rows:
            by_size.setdefault(r.get("bytes"), []).append(r)
        for size in (8, 64 << 10, 1 << 20, 256 << 20):
            rs = by_size.get(size)
            if not rs:
                continue
            parts = []
            for r in rs:
                floor = r.get("floor_us")  # the HBM-bound time measured in the same run
                frac = f" ({floor / r['time_us']:.2f} of the memory bound)" if floor else ""
                parts.append(f"{r['algorithm']} {r['time_us']:.1f} us{frac}"
                             f"{'' if not r.get('wrong') else ' WRONG ' + str(r['wrong'])}")
            lines.append(f"threads x{n} {_size(size):>6}: " + "; ".join(parts))
        if "empty_launch_us" in data:
            lines.append(f"threads x{n} empty kernel launch: {data['empty_launch_us']:.1f} us")
    return lines


def procs_lines(out):
    lines = []
    for n in (2, 3, 4):
        data = _load(out, f"procs_{n}.json")
        if data is None:
            lines.append(f"processes x{n}: no result (procs_{n}.txt)")
            continue
        wrong = sum(r.get("wrong", 0) for r in data["rows"])
        names = sorted({r["name"] for r in data["rows"]})
        missing = sorted({r["name"] for r in data["rows"] if "us" not in r})
        lines.append(f"processes x{n} on {data['gpus']} GPU(s): #wrong {wrong} over {len(names)} "
                     f"peers" + (f"; not run: {', '.join(missing)}" if missing else ""))
        for size in (8, 64 << 10, 1 << 20, 256 << 20):
            rs = [r for r in data["rows"] if r["bytes"] == size and "us" in r]
            if rs:
                lines.append(f"processes x{n} {_size(size):>6}: " +
                             "; ".join(f"{r['name']} {r['us']:.1f} us" for r in rs))
    return lines


def ddp_lines(out):
    data = _load(out, "ddp_resnet50.json")
    if data is None:
        return ["ddp_resnet50: no result (ddp_resnet50.txt)"]
    records = data if isinstance(data, list) else data.get("records", [])
    lines = []
    stock = next((r for r in records if r["mode"] == "stock" and r.get("available")), None)
    for r in records:
        if r["mode"] == "baseline":
            continue
        if not r.get("available"):
            lines.append(f"ddp {r['mode']}: not run ({r.get('reason')})")
            continue
        vs = f", {r['step_time_s'] / stock['step_time_s']:.3f}x stock" if stock else ""
        lines.append(f"ddp {r['mode']} N={r['world_size']}: {r['step_time_s'] * 1e3:.1f} ms/step{vs}")
    return lines


def cpu_lines(out):
    lines = []
    for n in (4, 8):
        data = _load(out, f"cpu_collectives_{n}.json")
        if data is None:
            lines.append(f"cpu x{n}: no result (cpu_collectives_{n}.txt)")
            continue
        for s in data.get("summary", []):
            lines.append(f"cpu x{n} {s['line']}")
    return lines


def _size(b):
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale}{unit}"
    return str(b)


def main(out):
    print("# bench/gpu_check.sh")
    for name, status, took in _steps(out):
        print(f"step {name:<20} {status:<14} {took}")
    for line in threads_lines(out) + procs_lines(out) + ddp_lines(out) + cpu_lines(out):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/out/gpu")
