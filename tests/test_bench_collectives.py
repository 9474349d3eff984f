"""bench/collectives_perf.py end to end, quickly: 2 CPU ranks, two tiny sizes, one round,
through its command line; every collective in the JSON, every check exact.

One run serves most checks (starting ranks costs seconds on a 2-core host). The Open MPI
column is checked where mpirun and mpi4py are installed (then in turns, in the bench's own
ranks under mpirun; and through its own launch where the joint one cannot start); the
pycomm backend's columns where `import pycomm` registers the backend (until then the bench
must say it is absent); the torch floor (the null backend) always; DeepSpeed's column where
deepspeed imports, else the line saying why it is absent.
"""
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

import pycomm  # noqa: F401  (registers the backend, once it exists)

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "collectives_perf.py"
from support.bench_script import run_script  # noqa: E402  (puts bench/ on sys.path)

pytestmark = pytest.mark.bench

COLLECTIVES = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all"]
SIZES = [8, 1024]
HAS_BACKEND = "pycomm" in dist.Backend.backend_list
HAS_MPI = shutil.which("mpirun") is not None and importlib.util.find_spec("mpi4py") is not None
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("collectives")
    stdout, _ = run_script("collectives_perf.py", [
        "--nproc", "2", "-b", "8", "-e", "1K", "-f", "128", "--rounds", "1", "--min-time",
        "0.005", "--min-iters", "2", "--warmup", "1", "--no-deepspeed", "--json", out / "c.json"],
        out, 120)
    return json.loads((out / "c.json").read_text()), stdout


def test_every_collective_and_size(sweep):
    data, _ = sweep
    rows = data["rows"]
    assert [r["collective"] for r in data["summary"]] == COLLECTIVES
    for name in COLLECTIVES:
        mine = [r for r in rows if r["collective"] == name]
        assert len(mine) == len(SIZES), name
        for r in mine:
            assert r["world_size"] == 2 and r["dtype"] == "float32"
            assert r["gloo_us"] > 0 and r["gloo_wrong"] == 0, r
            assert r["ceiling_us"] > 0
            # nccl-tests: size is the larger of a rank's input and output.
            assert r["size"] == 4 * max(r["in_count"], r["out_count"])
            assert r["gloo_algbw"] == pytest.approx(r["size"] / r["gloo_us"] / 1e3)
            assert r["gloo_busbw"] == pytest.approx(r["gloo_algbw"] * r["busbw_factor"])
    factors = {r["collective"]: r["busbw_factor"] for r in rows}
    assert factors == {"all_reduce": 1.0, "broadcast": 1.0, "reduce": 1.0, "all_gather": 0.5,
                       "reduce_scatter": 0.5, "all_to_all": 0.5}


def test_pycomm_columns_exact(sweep):
    data, stdout = sweep
    rows = data["rows"]
    assert all(r["wrong"] == 0 for r in rows)
    assert "pycomm #wrong total: 0" in stdout
    for r in rows:
        if r["collective"] == "all_reduce":
            assert r["pycomm_direct_us"] > 0 and r["pycomm_direct_wrong"] == 0
            assert r["pycomm_norestore_wrong"] == 0
            # What pycomm.tools.scaling.calibrate reads.
            assert r["pycomm_us"] == r["pycomm_direct_us"] and r["stock_us"] == r["gloo_us"]
        else:
            assert "pycomm_us" not in r  # a calibration must leave these rows out
        if HAS_BACKEND:
            assert r["pycomm_backend_us"] > 0 and r["pycomm_backend_wrong"] == 0, r
            assert r["gloo_over_pycomm"] > 0
    if not HAS_BACKEND:
        assert "pycomm backend absent" in stdout


def test_mpi_column(sweep):
    data, stdout = sweep
    if not HAS_MPI:
        assert "Open MPI column absent" in stdout and "pip install mpi4py" in stdout
        return
    for r in data["rows"]:
        assert r["mpi_us"] > 0 and r["mpi_wrong"] == 0, r
        # The bench started its ranks under mpirun: MPI's rounds are taken in turns.
        assert r["mpi_in_turns"] is True, r
    assert data["meta"]["mpi"]["in_turns"] is True
    assert ("in the bench's own ranks (one `mpirun --allow-run-as-root --oversubscribe "
            "--bind-to none -np 2` launch), on numpy views of the same tensors, timed in turns "
            "with the others") in stdout
    assert "timed in its own mpirun launch" not in stdout


def test_torch_floor_column(sweep):
    """The null backend's column: every collective timed through the same dist.* calls,
    unchecked, below pycomm; pyc-torch and (pyc-torch)/mpi beside pyc/mpi, in the table and
    the summary lines."""
    data, stdout = sweep
    rows = data["rows"]
    for r in rows:
        assert r["torch_floor_us"] > 0 and r["torch_floor_wrong"] is None, r
        assert len(r["torch_floor_rounds_us"]) == 1
        if HAS_BACKEND:
            assert r["pycomm_minus_torch_us"] == pytest.approx(
                r["pycomm_backend_us"] - r["torch_floor_us"])
            if HAS_MPI:
                assert r["pycomm_minus_torch_over_mpi"] == pytest.approx(
                    r["pycomm_minus_torch_us"] / r["mpi_us"])
    if HAS_BACKEND:
        # A floor: torch's share of a call is below the whole call (medians over the rows,
        # each of few calls on a shared host).
        assert (statistics.median(r["torch_floor_us"] for r in rows)
                < statistics.median(r["pycomm_backend_us"] for r in rows))
    assert "torch = dist.new_group(backend='pycomm_null')" in stdout
    assert "|   torch us  +-% |" in stdout and "pyc-torch us" in stdout
    # The column in the tables' headers (a summary line may name it either way).
    headers = [line for line in stdout.splitlines() if "pycomm us" in line and not line.startswith("#")]
    assert headers and all(("(pyc-torch)/mpi" in h) == HAS_MPI for h in headers), headers
    for s in data["summary"]:
        assert s["net_mpi_targets_met"] == [None, None]  # 64 KiB and 16 MiB not swept
        if HAS_MPI and HAS_BACKEND:
            assert "(pycomm-torch)/MPI" in s["line"], s["line"]


def test_table(sweep):
    _, stdout = sweep
    for name in COLLECTIVES:
        assert f"## {name} " in stdout
    assert stdout.count("#wrong") >= len(COLLECTIVES)
    # Judged against the best peer and the ceiling with the rounds' range, not against gloo.
    # And against Open MPI with torch's own per-call cost (the floor column) taken out.
    assert ("summary, median (range over the rounds); target: pycomm's time at most 1x the "
            "best peer's (Open MPI, DeepSpeed) at 64 KiB and 16 MiB, and pycomm - torch at most "
            "1.25x Open MPI's time at 64 KiB (torch: its own per-call cost, the null backend's "
            "time in these turns); gloo/pyc judges nothing" in stdout)
    assert "all_reduce: 64 KiB: not in this sweep; 16 MiB: not in this sweep" in stdout


def test_bad_collective_refused():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--collective", "all_reduce,nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "nope" in proc.stderr


@pytest.mark.skipif(not HAS_BACKEND, reason="the pycomm backend is not registered")
def test_fake_hosts_columns(tmp_path):
    """--hosts 2 with 4 ranks: the hierarchical column beside flat gloo and the flat pycomm
    ring, the intra/inter sweeps for the model, every check exact."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, str(SCRIPT), "--hosts", "2", "--ranks", "4", "-b", "1K", "-e", "128K",
           "-f", "128", "--collective", "all_reduce,all_gather", "--rounds", "1", "--min-time",
           "0.005", "--min-iters", "2", "--warmup", "1", "--no-mpi", "--no-deepspeed",
           "--json", str(tmp_path / "h.json")]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240, start_new_session=True)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    data = json.loads((tmp_path / "h.json").read_text())
    assert data["meta"]["hosts"] == 2
    for r in data["rows"]:
        assert r["world_size"] == 4 and r["hosts"] == 2, r
        assert r["pycomm_hier_us"] > 0 and r["pycomm_hier_wrong"] == 0, r
        assert r["gloo_wrong"] == 0 and r["pycomm_backend_wrong"] == 0, r
        assert r["flat_over_hier"] > 0 and r["gloo_over_pycomm"] > 0, r
        if r["collective"] == "all_reduce":
            assert r["intra_host_us"] > 0 and r["inter_host_us"] > 0, r
        # The floor beside the hierarchical column, which goes through dist.* too.
        assert r["torch_floor_us"] > 0 and r["pycomm_minus_torch_us"] == pytest.approx(
            r["pycomm_hier_us"] - r["torch_floor_us"])
        assert "mpi_us" not in r and "mpi_in_turns" not in r
    assert "flat/hier" in proc.stdout and "hier us" in proc.stdout
    assert "Open MPI column absent: --no-mpi" in proc.stdout


@pytest.mark.skipif(not HAS_MPI, reason="mpirun or mpi4py missing")
def test_mpi_own_launch_where_the_joint_one_fails(tmp_path):
    """An mpirun that cannot start the bench's own ranks (here: one that refuses any program
    but bench/mpi_worker.py) leaves the ranks spawned and Open MPI timed in its own launch,
    as before, the header saying why it is not in turns; its values are still checked."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mpirun").write_text(
        "#!/bin/sh\n"
        "case \"$*\" in *mpi_worker.py*) PATH=" + os.environ["PATH"] + " exec mpirun \"$@\";; esac\n"
        "echo 'no joint launch here' >&2\nexit 7\n")
    (fake / "mpirun").chmod(0o755)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1",
               PATH=f"{fake}:{os.environ['PATH']}")
    cmd = [sys.executable, str(SCRIPT), "--nproc", "2", "-b", "8", "-e", "1K", "-f", "128",
           "--collective", "all_reduce,all_gather", "--rounds", "1", "--min-time", "0.005",
           "--min-iters", "2", "--warmup", "1", "--no-deepspeed", "--json",
           str(tmp_path / "m.json")]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240, start_new_session=True)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    data = json.loads((tmp_path / "m.json").read_text())
    for r in data["rows"]:
        assert r["mpi_us"] > 0 and r["mpi_wrong"] == 0 and r["mpi_in_turns"] is False, r
        assert r["torch_floor_us"] > 0, r
    assert data["meta"]["mpi"]["in_turns"] is False
    assert ("timed in its own mpirun launch" in proc.stdout
            and "(not in turns: mpirun exited with 7 before its ranks were up: no joint launch "
                "here)" in proc.stdout), proc.stdout


def test_deepspeed_column(tmp_path):
    """DeepSpeed's shared-memory all-reduce where deepspeed imports (its op compiled at first
    use), checked exactly like the others; else absent, saying why."""
    stdout, _ = run_script("collectives_perf.py", [
        "--nproc", "2", "-b", "8", "-e", "64K", "-f", "64", "--collective", "all_reduce",
        "--rounds", "1", "--min-time", "0.005", "--min-iters", "2", "--warmup", "1",
        "--no-mpi", "--no-direct", "--json", tmp_path / "d.json"], tmp_path, 400)
    rows = json.loads((tmp_path / "d.json").read_text())["rows"]
    if not HAS_DEEPSPEED:
        assert "deepspeed column absent: deepspeed is not importable" in stdout
        assert all("deepspeed_us" not in r for r in rows)
        return
    assert "deepspeed = DeepSpeed " in stdout, stdout
    assert [r["size"] for r in rows] == [8, 512, 32768, 65536]
    for r in rows:
        assert r["deepspeed_us"] > 0 and r["deepspeed_wrong"] == 0, r
    # Its workspaces are unlinked once mapped: nothing of it stays in /dev/shm.
    assert not [n for n in os.listdir("/dev/shm") if n.startswith("deepspeed_allreduce_buffer")
                and "pycomm-bench" in n]
