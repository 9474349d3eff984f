"""bench/ddp_resnet50.py end to end: a tiny run (2 CPU ranks, resnet18, 16-pixel images,
batch 4, 2 rounds of 1 timed step) through its command line, checking the JSON records, the
ratios round by round, the breakdown of a step and the PNG.

One run serves every check (spawning ranks costs seconds on a 2-core host). On CPU ranks
every mode must run; `backend` once `import pycomm` registers the "pycomm" backend (until
then it must say why it is unavailable).
"""
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

import pycomm  # noqa: F401  (registers the backend, once it exists)
from pycomm.tools import results_schema

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "ddp_resnet50.py"
from support.bench_script import run_script  # noqa: E402  (puts bench/ on sys.path)

pytestmark = pytest.mark.bench

HOOKED = ["stock", "ring", "ring-bf16"]          # timed through a comm hook
MODES = ["no-comm", "sync-only", *HOOKED, "backend"]
ON_PYCOMM = ["sync-only", "ring", "ring-bf16", "backend"]  # their buckets are pycomm jobs
HAS_BACKEND = "pycomm" in dist.Backend.backend_list
REQUIRED = {"mode": str, "world_size": int, "step_time_s": float, "images_per_s": float,
            "speedup": float, "efficiency": float, "comm_share": float, "amdahl_f": float}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    stdout, stderr = run_script("ddp_resnet50.py", [
        "--device", "cpu", "--nproc", "2", "--rounds", "2", "--steps", "1", "--warmup", "1",
        "--image-size", "16", "--batch-size", "4", "--model", "resnet18",
        "--modes", ",".join(MODES), "--json", out / "ddp.json", "--plot", out / "ddp.png"],
        out, 150)
    return out, subprocess.CompletedProcess([], 0, stdout, stderr)


def test_json_schema(tiny_run):
    out, _ = tiny_run
    doc = results_schema.load(out / "ddp.json")
    assert doc["meta"]["command"].startswith("python") and doc["meta"]["date"]
    records = doc["rows"]
    assert isinstance(records, list)
    by_mode = {r["mode"]: r for r in records}
    assert set(by_mode) == {"baseline", *MODES}
    base = by_mode["baseline"]
    assert base["world_size"] == 1 and base["speedup"] == pytest.approx(1.0)
    for mode in MODES:
        r = by_mode[mode]
        if mode == "backend" and not HAS_BACKEND:
            assert r["available"] is False and "not a registered" in r["reason"], r
            continue
        assert r["available"] is True, r
        for key, typ in REQUIRED.items():
            if mode == "backend" and key == "comm_share":
                continue  # no hook: not measured in training
            assert isinstance(r[key], typ), (mode, key, r[key])
        assert r["world_size"] == 2
        for key in ("step_time_s", "images_per_s", "speedup", "efficiency", "baseline_step_s"):
            assert math.isfinite(r[key]) and r[key] > 0, (mode, key, r[key])
        # The definitions tie the figures together.
        assert r["images_per_s"] == pytest.approx(2 * 4 / r["step_time_s"])
        assert r["speedup"] == pytest.approx(2 * r["baseline_step_s"] / r["step_time_s"])
        assert r["efficiency"] == pytest.approx(r["speedup"] / 2)
        assert r["amdahl_f"] == pytest.approx(2 / r["speedup"] - 1)
        # The ratios are taken round by round (the modes ran in turns): median and range.
        assert len(r["step_times_s"]) == 2 and r["round_step_times_s"] == r["step_times_s"]
        for key, ceiling in (("over_no_comm", "no-comm"), ("over_sync_only", "sync-only")):
            each = [m / c for m, c in zip(r["round_step_times_s"],
                                          by_mode[ceiling]["round_step_times_s"])]
            assert r[key] == pytest.approx(statistics.median(each))
            assert (r[key + "_min"], r[key + "_max"]) == pytest.approx((min(each), max(each)))
        check_breakdown(mode, r)
        # resnet18 with 10 classes: 11,181,642 fp32 gradients in DDP's buckets.
        assert sum(r["bucket_bytes"]) == 11_181_642 * 4
        wire = 2 if mode == "ring-bf16" else 4
        if mode == "sync-only":  # one element per bucket
            assert r["wire_bytes"] == [4] * r["buckets"]
        else:
            assert sum(r["wire_bytes"]) == 11_181_642 * wire
        if mode in ("no-comm", "sync-only"):
            assert r["comm_alone_s"] == 0 and r["prediction"] is None
            continue
        assert math.isfinite(r["comm_alone_s"]) and r["comm_alone_s"] > 0, r
        # The threads that ran the buckets alone held a core for some of that time.
        assert 0 < r["comm_alone_cpu_s"] < 10 * r["comm_alone_s"], r
        if mode in HOOKED:
            assert math.isfinite(r["comm_s"]) and r["comm_s"] > 0, r
            assert 0 < r["comm_share"] and 0 <= r["exposed_share"] <= 1
            assert 0 <= r["exposed_comm_s"] <= r["step_time_s"]
        else:  # backend: DDP's own path, no hook to mark its buckets
            assert r["comm_s"] is None and r["exposed_comm_s"] is None
        p = r["prediction"]
        assert p is not None and p["predicted_step_s"] > 0
        assert p["full_overlap_step_s"] <= p["predicted_step_s"] <= p["no_overlap_step_s"]
        assert r["calibration"]["alpha_s"] >= 0


def check_breakdown(mode, r):
    """Each rank's parts of a step: the loop's marks always, the pycomm jobs' times for the
    modes whose buckets pycomm runs, and the CPU time of the threads that ran."""
    parts = r["breakdown"]
    assert len(parts) == 2
    for p in parts:
        for key in ("forward", "backward", "optimizer"):
            assert 0 < p[key] < r["step_time_s"] * 1.01, (mode, key, p)
        assert p["buckets"] >= 1 and 0 <= p["finalize"] <= p["backward"], (mode, p)
        assert p["cpu"]["main"] > 0
        if mode in ON_PYCOMM:
            assert p["queue"] >= 0 and p["run"] > 0 and p["complete"] >= 0, (mode, p)
            assert p["cpu"].get("pycomm-worker", 0) > 0, (mode, p)
        else:
            assert p["queue"] is None and p["run"] is None, (mode, p)


def test_png_and_table(tiny_run):
    out, proc = tiny_run
    png = (out / "ddp.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "1-rank baseline" in proc.stdout
    assert "Amdahl f" in proc.stdout and "scaling model" in proc.stdout
    assert "/no-comm" in proc.stdout and "/sync-only" in proc.stdout
    for line in ("target N=2: ring and backend at most 1.03x the sync-only step: ring ",
                 "target N=2: ring and backend at most 1.03x the no-comm step: ring ",
                 "target N=2: backend at most the ring's step + 1%: backend/ring ",
                 "N=2: sync-only/no-comm ", "where a step goes",
                 "N=2: the floor when the ranks' compute threads fill every core"):
        assert line in proc.stdout, line
    for mode in MODES:
        assert f"\n{mode} " in proc.stdout
    assert f"wrote {out / 'ddp.json'}" in proc.stdout
    assert "round 2/2" in proc.stderr  # the progress bar


def test_sync_bn_refused_on_cpu():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--sync-bn"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--sync-bn" in proc.stderr and "CUDA" in proc.stderr


def test_default_modes():
    import ddp_resnet50

    args = ddp_resnet50.parse_args([])
    # no-comm and sync-only are the ceilings every default run measures; backend and ring are
    # judged by them.
    assert args.modes[:2] == ["no-comm", "sync-only"]
    assert {"stock", "ring", "backend"} <= set(args.modes)
    assert (args.rounds, args.steps) == (6, 3)


def test_unknown_mode_refused():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--modes", "ring,nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "nope" in proc.stderr
