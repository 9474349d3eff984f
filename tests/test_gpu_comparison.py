"""The pieces of the NCCL comparison (issue 48) that need no GPU, so CI runs them: the
targets' verdicts (bench/gpu/targets.py) on made-up results of a GPU check, the check of
what a call carries (bench/gpu/carry.py), and what bench/gpu/build_nccl.sh refuses before
it builds anything."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu import targets  # the checkout's root is on pytest's pythonpath

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def _doc(times, why=None, meta=None):
    """A cuda_allreduce_perf document: times {name: {bytes: us}}; why {name: reason}."""
    rows = [dict(name=name, bytes=b, us=us) for name, by in times.items() for b, us in by.items()]
    rows += [dict(name=name, bytes=8, why=reason) for name, reason in (why or {}).items()]
    return dict(meta=meta or {}, rows=rows)


def test_pycomm_against_nccl_met_and_missed():
    procs = _doc({"copy floor": {8: 1.0, MIB: 5.0, 256 * MIB: 900.0},
                  "pycomm auto": {8: 9.0, MIB: 14.0, 256 * MIB: 1300.0},
                  "pycomm ring": {8: 2.0, MIB: 2.0, 256 * MIB: 200.0},
                  "nccl": {8: 10.0, MIB: 15.0, 256 * MIB: 1100.0}})
    lines = targets.all_reduce_lines(procs)
    # pycomm's default route counts, not a faster algorithm named by hand, nor the floor.
    assert lines[0] == ("target: pycomm's all-reduce at most NCCL's time, 8 B to 1 MiB: met "
                        "(worst 0.93x at 1048576 B)")
    assert "MISSED (worst 1.18x at 268435456 B)" in lines[1] and "time at most 1.11x" in lines[1]
    assert lines[2] == ("target: pycomm vs symmetric memory's one-shot: not judged: "
                        "no mps_symm_2 result")


def test_nccl_and_symmetric_memory_that_did_not_run_say_why():
    procs = _doc({"pycomm auto": {8: 9.0}}, why={"nccl": "NCCL 2.28.9 refuses 2 ranks"})
    symm = _doc({}, why={"symm one_shot": "rendezvous refused"})
    lines = targets.all_reduce_lines(procs, symm)
    assert lines == ["target: pycomm vs NCCL: not judged: NCCL did not run "
                     "(NCCL 2.28.9 refuses 2 ranks)",
                     "target: pycomm vs symmetric memory's one-shot: not judged: rendezvous refused"]
    symm = _doc({"symm one_shot": {8: 8.0, 64 << 10: 20.0, MIB: 30.0}})
    procs = _doc({"pycomm auto": {8: 9.0, 64 << 10: 18.0, MIB: 99.0}, "nccl": {8: 10.0}})
    # Up to 64 KiB only: the 1 MiB row, far slower, is no part of this target.
    assert targets.all_reduce_lines(procs, symm)[-1].endswith("MISSED (worst 1.12x at 8 B)")


def test_resnet50_against_ddp_over_nccl():
    def ddp(backend, reason, **steps):
        rows = [dict(mode=m, step_time_s=s, available=True,
                     nccl="2.30.7 (/x/libnccl.so.2)" if backend == "nccl" else None)
                for m, s in steps.items()]
        return dict(meta=dict(stock_backend=backend, stock_reason=reason), rows=rows)

    met = targets.ddp_lines(ddp("nccl", None, stock=0.060, ring=0.055))
    assert met == ["target: ResNet-50's ring_hook step at most DDP over NCCL's (2.30.7 "
                   "(/x/libnccl.so.2)): met (55.0 vs 60.0 ms, 0.92x)"]
    over_gloo = targets.ddp_lines(ddp("gloo", "NCCL 2.28.9 refuses 2 ranks on 1 GPU(s)",
                                      stock=0.08, ring=0.05))
    assert over_gloo[0].endswith("not judged: the stock all-reduce ran over gloo "
                                 "(NCCL 2.28.9 refuses 2 ranks on 1 GPU(s))")


def test_a_dry_runs_plans_are_judged_nothing():
    assert targets.lines({"mps_procs_2": {"dry_run": True, "plan": {}}, "ddp_resnet50": None}) == []


def _carry(tmp_path, recorded_bytes):
    (tmp_path / "bench" / "results" / "nccl").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "nccl" / "build.json").write_text(json.dumps(
        dict(version="2.30.7", bytes=recorded_bytes - MIB, carried_bytes=recorded_bytes,
             date="2026-12-06")))
    (tmp_path / "a_file").write_bytes(b"x" * 1000)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "bench.gpu.carry"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_carried_tree_and_nccl_are_checked_against_a_calls_limit(tmp_path):
    done = _carry(tmp_path / "fits", 30 * MIB)
    assert done.returncode == 0, done.stderr
    assert "NCCL 30.0 MiB (bench/results/nccl/build.json (NCCL 2.30.7" in done.stdout, done.stdout
    over = _carry(tmp_path / "over", 64 * MIB)
    assert over.returncode == 1 and "OVER" in over.stderr, (over.stdout, over.stderr)


def _build_nccl(*args):
    return subprocess.run(["bash", str(REPO / "bench" / "gpu" / "build_nccl.sh"), *args],
                          capture_output=True, text=True, timeout=60)


def test_build_nccl_refuses_what_is_no_nccl_or_too_old(tmp_path):
    done = _build_nccl("--src", str(tmp_path))
    assert done.returncode == 2 and "is no NCCL checkout" in done.stderr, done.stderr
    (tmp_path / "makefiles").mkdir()
    (tmp_path / "makefiles" / "version.mk").write_text(
        "NCCL_MAJOR   := 2\nNCCL_MINOR   := 28\nNCCL_PATCH   := 9\n")
    done = _build_nccl("--src", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "is NCCL 2.28.9; ranks sharing a GPU need 2.30 or newer" in done.stderr, done.stderr
    done = _build_nccl("--what")
    assert done.returncode == 2 and "usage: bench/gpu/build_nccl.sh" in done.stderr


@pytest.mark.bench
def test_the_ranks_run_the_carried_nccl_and_records_say_which(tmp_path, monkeypatch):
    """use_carried has the processes a bench starts load the carried NCCL ahead of torch's
    own, and which_text names the file torch's calls then reach. Torch's own library,
    linked under another name, stands in for the one bench/gpu/build_nccl.sh makes."""
    from harness.peers import nccl

    own = nccl.loaded_library()
    if own is None:
        pytest.skip("this torch links no NCCL (a CPU build)")
    carried = tmp_path / nccl.CARRIED
    carried.parent.mkdir(parents=True)
    try:
        os.link(own, carried)
    except OSError:  # another file system
        shutil.copyfile(own, carried)
    monkeypatch.setattr(nccl, "REPO_ROOT", str(tmp_path))
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv(nccl.SHARED_GPU_ENV, raising=False)
    assert nccl.use_carried() == str(carried)
    assert nccl.use_carried() == str(carried)  # twice: preloaded once
    assert os.environ["LD_PRELOAD"] == str(carried) and os.environ[nccl.SHARED_GPU_ENV] == "1"
    env = dict(os.environ, PYTHONPATH=str(REPO / "bench"))
    code = "from harness.peers import nccl; print(nccl.which_text())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(f" ({carried})"), done.stdout
    # This process keeps the NCCL it had.
    assert nccl.loaded_library() == own


def test_a_sizes_time_is_the_median_of_its_rounds():
    """bench/cuda_allreduce_perf.py --rounds: every peer swept in turns, each size's time
    the median of the rounds' medians, the rounds kept for their spread."""
    import cuda_allreduce_perf as bench

    row = {}
    bench.add_round(row, 0, [1e-6, 2e-6, 3e-6])
    bench.add_round(row, None, [4e-6, 5e-6, 6e-6])  # the copy floor's: not checked
    bench.add_round(row, 1, [2e-6, 2e-6, 9e-6])
    assert row == dict(us_rounds=[2.0, 5.0, 2.0], us=2.0, us_min=1.0, us_max=9.0, wrong=1)
