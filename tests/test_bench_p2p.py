"""bench/p2p_perf.py end to end, quickly: 2 CPU ranks, two tiny sizes, one round, through
its command line; every pattern and peer in the JSON, every check exact.

One run serves every check (starting ranks costs seconds on a 2-core host). The Open MPI
column is checked where mpirun and mpi4py are installed (timed in turns, in the bench's own
ranks under mpirun), and must be absent, saying why, where they are not. The torch floor
(the null backend) is a column of every pattern.
"""
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

import pycomm  # noqa: F401  (registers the backend)
from pycomm.tools import results_schema as schema

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "p2p_perf.py"
from support.bench_script import run_script  # noqa: E402  (puts bench/ on sys.path)
from harness.p2p import CHECK_BYTES, PATTERNS, layout  # noqa: E402

pytestmark = pytest.mark.bench

SIZES = [8, 1024]
# --window 8 with --window-bytes 4K: 8 messages of 8 B, but only 4 of 1 KiB.
WINDOWS = {8: 8, 1024: 4}
HAS_BACKEND = "pycomm" in dist.Backend.backend_list
HAS_MPI = shutil.which("mpirun") is not None and importlib.util.find_spec("mpi4py") is not None


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("p2p")
    stdout, _ = run_script("p2p_perf.py", [
        "--nproc", "2", "-b", "8", "-e", "1K", "-f", "128", "--rounds", "1", "--min-time",
        "0.005", "--min-iters", "2", "--warmup", "1", "--window", "8", "--window-bytes", "4K",
        "--json", out / "p.json"], out, 120)
    return out / "p.json", stdout


def test_every_pattern_and_size(run):
    path, _ = run
    data = json.loads(path.read_text())
    rows = data["rows"]
    assert [s["collective"] for s in data["summary"]] == list(schema.P2P)
    for name, pattern in PATTERNS.items():
        mine = [r for r in rows if r["collective"] == pattern.collective]
        assert [r["size"] for r in mine] == SIZES, name
        for r in mine:
            assert r["world_size"] == 2 and r["dtype"] == "float32" and r["op"] == "none"
            assert r["count"] * 4 == r["size"]
            assert r["busbw_factor"] == (2 if name == "bibw" else 1)
            assert r["window"] == (WINDOWS[r["size"]] if name == "bw" else 1)
            assert r["ceiling_us"] > 0
            for peer in (schema.GLOO,) + ((schema.PYCOMM_BACKEND,) if HAS_BACKEND else ()):
                us = r[schema.column(peer, "us")]
                assert us > 0 and r[schema.column(peer, "wrong")] == 0, (peer, r)
                assert r[schema.column(peer, "algbw")] == pytest.approx(r["size"] / us / 1e3)
                assert r[schema.column(peer, "busbw")] == pytest.approx(
                    r[schema.column(peer, "algbw")] * r["busbw_factor"])
    # A p2p row must never be read as an all_reduce row (pycomm predict --calibrate).
    assert schema.rows(str(path), "all_reduce") == []


def test_pycomm_column(run):
    path, stdout = run
    rows = json.loads(path.read_text())["rows"]
    assert HAS_BACKEND, "`import pycomm` registers the 'pycomm' backend"
    assert "pycomm backend absent" not in stdout
    for r in rows:
        assert r["pycomm_peer"] == schema.PYCOMM_BACKEND and r["wrong"] == 0, r
        assert r["gloo_over_pycomm"] > 0 and r["frac_of_ceiling"] > 0, r
    assert "pycomm #wrong total: 0" in stdout


def test_c10d_column_beside_the_measured_floor(run):
    """pyc-c10d (the backend called directly) times and checks the latency pattern only; the
    latency summary gives torch's per-call cost as the null backend measured it, with the
    old estimate (pycomm - pyc-c10d) beside it."""
    path, stdout = run
    data = json.loads(path.read_text())
    us = schema.column(schema.PYCOMM_C10D, "us")
    for r in data["rows"]:
        if r["collective"] == PATTERNS["latency"].collective:
            assert r[us] > 0 and r[schema.column(schema.PYCOMM_C10D, "wrong")] == 0, r
        else:
            assert us not in r, r
    first = next(r for r in data["rows"] if r["collective"] == PATTERNS["latency"].collective)
    line = next(s["line"] for s in data["summary"] if s["collective"] == first["collective"])
    share = first[schema.column(schema.PYCOMM_BACKEND, "us")] - first[us]
    assert (f"at 8 B: torch's per-call cost measured {first['torch_floor_us']:.2f} us "
            f"(estimate pycomm - pyc-c10d: {share:.2f} us)") in line, line
    assert "pyc-c10d us" in stdout


def test_torch_floor_column(run):
    """The null backend's column in every pattern, through the same dist.* calls, unchecked,
    below pycomm; pyc-torch and (pyc-torch)/mpi in the table; and per pattern the target
    pycomm <= mpi + torch from 8 B to 32 KiB judged in the summary."""
    path, stdout = run
    data = json.loads(path.read_text())
    rows = data["rows"]
    for r in rows:
        assert r["torch_floor_us"] > 0 and r["torch_floor_wrong"] is None, r
        assert r["pycomm_minus_torch_us"] == pytest.approx(
            r["pycomm_backend_us"] - r["torch_floor_us"])
        if HAS_MPI:
            assert r["pycomm_minus_torch_over_mpi"] == pytest.approx(
                r["pycomm_minus_torch_us"] / r["mpi_us"])
    assert (statistics.median(r["torch_floor_us"] for r in rows)
            < statistics.median(r["pycomm_backend_us"] for r in rows))
    assert "torch = dist.new_group(backend='pycomm_null')" in stdout
    assert stdout.count("|   torch us  +-% |") == 3 and "pyc-torch us" in stdout
    # The column in the tables' headers (the summary lines name it, as "-", either way).
    headers = [line for line in stdout.splitlines() if "pycomm us" in line and not line.startswith("#")]
    assert headers and all(("(pyc-torch)/mpi" in h) == HAS_MPI for h in headers), headers
    assert "target: pycomm <= mpi + torch from 8 B to 32 KiB in every pattern" in stdout
    for s in data["summary"]:
        assert "pycomm <= mpi + torch at 8 B..32 KiB: " in s["line"], s["line"]
        assert "net_mpi_target_met" in s
        if not HAS_MPI:
            assert s["net_mpi_target_met"] is None


def test_mpi_column(run):
    path, stdout = run
    rows = json.loads(path.read_text())["rows"]
    if not HAS_MPI:
        assert "Open MPI column absent" in stdout
        assert all("mpi_us" not in r for r in rows)
        return
    for r in rows:
        assert r["mpi_us"] > 0 and r["mpi_wrong"] == 0, r
        assert r["pycomm_over_mpi"] > 0 and r["mpi_in_turns"] is True, r
    assert "timed in turns with the others" in stdout
    assert "timed in its own mpirun launch" not in stdout


def test_table(run):
    _, stdout = run
    for name in PATTERNS:
        assert f"## {name} " in stdout
    assert stdout.count("#wrong") >= 3 * 2
    assert "gloo/pyc" in stdout and "of_ceil" in stdout


def test_layout():
    bw = PATTERNS["bw"]
    assert schema.P2P == tuple(p.collective for p in PATTERNS.values())
    # A window of 64 x 64 MiB is capped at --window-bytes (256 MiB): 4 messages.
    lay = layout(bw, 64 << 20, 4, 64, 256 << 20)
    assert (lay["count"], lay["window"], lay["check_window"]) == (16 << 20, 4, 4)
    assert layout(bw, 1 << 30, 4, 64, 256 << 20)["window"] == 1
    assert layout(bw, 8, 4, 64, 256 << 20)["check_window"] == min(64, CHECK_BYTES // 8)
    assert layout(PATTERNS["latency"], 3, 4, 64, 256 << 20)["size"] == 4  # one element at least
    assert bw.per_call(16) == 16 and PATTERNS["latency"].per_call(16) == 2


@pytest.mark.parametrize("arg", [["--pattern", "latency,nope"], ["--nproc", "3"]])
def test_bad_arguments_refused(arg):
    proc = subprocess.run([sys.executable, str(SCRIPT)] + arg, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and arg[1].split(",")[-1] in proc.stderr
