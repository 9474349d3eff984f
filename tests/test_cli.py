"""The pycomm command (pycomm/tools/cli.py, pycomm/tools/doctor.py), called in-process through
main()."""
import json
import math
import os
import platform
import re
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

import pycomm
from pycomm.tools import scaling
from pycomm.tools.cli import main

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- predict

NUM = r"([0-9][0-9.]*)"


def printed(out, pattern):
    """The numbers a pattern captures in the printed text."""
    m = re.search(pattern, out)
    assert m, f"{pattern!r} not in:\n{out}"
    return [float(g) for g in m.groups()]


@pytest.mark.parametrize("preset", sorted(scaling.PRESETS))
def test_predict_prints_the_library_numbers(capsys, preset):
    sc = scaling.get_preset(preset)
    p = sc.predict()
    code, out, _ = run(capsys, "predict", "--preset", preset)
    assert code == 0
    assert out.startswith(f"{preset}: {sc.title}")
    assert f"ring bound by {p.ring.name}:" in out
    # the step and its parts, all in one unit (ms printed to 3 decimals, seconds to 4)
    m = re.search(rf"step +T_N = {NUM} (ms|s) compute \+ {NUM} \2 overhead \+ {NUM} \2 "
                  rf"exposed = {NUM} \2\n", out)
    assert m, out
    unit = 1e-3 if m[2] == "ms" else 1
    t1, tn = float(m[1]) * unit, float(m[5]) * unit
    assert t1 == pytest.approx(p.compute_s, abs=5e-5) and tn == pytest.approx(p.step_s, abs=5e-5)
    m = re.search(r"= ([0-9.]+) (ms|s) \(([0-9.]+)% of the step\)", out)
    assert m, out
    comm = float(m[1]) * (1e-3 if m[2] == "ms" else 1)
    assert comm == pytest.approx(p.comm_s, abs=5e-7 if m[2] == "ms" else 5e-4)
    assert float(m[3]) == pytest.approx(100 * p.comm_fraction, abs=0.05)
    # epochs: each printed figure is the library's, and printed steps x step = printed epoch
    steps1, e_t1, epoch1, n, steps_n, e_tn, epoch_n = printed(
        out, rf"epoch +1 GPU: {NUM} steps x {NUM} s = {NUM} s; {NUM} GPUs: {NUM} steps x "
             rf"{NUM} s = {NUM} s")
    assert (steps1, n, steps_n) == (p.one_gpu_steps_per_epoch, p.gpus, p.steps_per_epoch)
    assert e_t1 == pytest.approx(t1, abs=5e-4) and e_tn == pytest.approx(tn, abs=5e-5)
    assert epoch1 == pytest.approx(p.one_gpu_epoch_s, abs=0.05)
    assert epoch_n == pytest.approx(p.epoch_s, abs=0.05)
    assert epoch_n == pytest.approx(steps_n * e_tn, abs=0.05 + steps_n * 5e-5)
    s, e, thr, e_thr = printed(out, rf"S = {NUM} \(epoch\), efficiency {NUM}%; throughput "
                                    rf"N\*T_1/T_N = {NUM}, efficiency {NUM}%")
    assert s == pytest.approx(p.epoch_speedup, abs=0.005)
    assert e == pytest.approx(100 * p.epoch_efficiency, abs=0.05)
    assert thr == pytest.approx(p.speedup, abs=0.005)
    assert e_thr == pytest.approx(100 * p.efficiency, abs=0.05)
    assert e <= 100 and e_thr <= 100
    if sc.baseline_gpus == 1:
        assert " vs " not in out.split("\n  - ")[0]
        return
    x, ideal, eff, n1, n0, t0, tn2 = printed(
        out, rf"vs \d+ GPUs +{NUM}x \(ideal {NUM}x, efficiency {NUM}%\) = "
             rf"\({NUM}/{NUM}\) x {NUM} / {NUM}")
    assert (n1, n0, ideal, tn2) == (p.gpus, p.baseline_gpus, p.gpus / p.baseline_gpus, tn)
    assert x == pytest.approx(p.speedup_vs_baseline, abs=0.005)
    assert x == pytest.approx(n1 / n0 * t0 / tn2, rel=2e-3)   # the printed formula holds
    assert eff == pytest.approx(100 * x / ideal, abs=0.1)


def test_predict_32gpu_ring_is_bound_by_the_slowest_hop(capsys):
    code, out, _ = run(capsys, "predict", "--preset", "resnet50-32gpu-nccl-ib")
    assert code == 0
    assert "32 GPUs on 4 hosts (8 per host); ring bound by nvlink3+ib-hdr: alpha 5.0 us, " \
           "B 25.000 GB/s" in out


@pytest.mark.parametrize("preset", sorted(scaling.PRESETS))
def test_predict_json_is_the_library_prediction(capsys, preset):
    sc = scaling.get_preset(preset)
    code, out, _ = run(capsys, "predict", "--preset", preset, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["scenario"] == preset and data["calibration"] is None
    assert data["prediction"] == json.loads(json.dumps(asdict(sc.predict())))
    assert data["notes"] == list(sc.notes)
    p, c = data["prediction"], data["cluster"]
    assert p["hosts"] == math.ceil(c["gpus"] / c["gpus_per_host"])
    assert p["speedup_vs_baseline"] == pytest.approx(
        p["gpus"] / p["baseline_gpus"] * p["baseline_step_s"] / p["step_s"])
    links = [c["intra"]] if p["hosts"] == 1 else [c["intra"], c["inter"]]
    assert p["ring"]["bandwidth_Bps"] == min(link["bandwidth_Bps"] for link in links)


def test_predict_free_form(capsys):
    code, out, _ = run(capsys, "predict", "--gpus", "32", "--gpus-per-host", "8",
                       "--interconnect", "ib", "--step-compute-s", "0.8", "--grad-mb", "100",
                       "--batch", "256", "--bucket-mb", "0", "--overlap", "0", "--json")
    assert code == 0
    p = json.loads(out)["prediction"]
    expected_comm = 2 * 31 * 5e-6 + 2 * 31 / 32 * 100e6 / 25e9   # one bucket, IB HDR
    assert p["hosts"] == 4 and p["buckets"] == 1
    assert p["comm_s"] == pytest.approx(expected_comm)
    assert p["step_s"] == pytest.approx(0.8 + expected_comm)
    assert p["speedup"] == pytest.approx(32 * 0.8 / (0.8 + expected_comm))


def test_predict_free_form_text_and_overrides(capsys):
    code, out, _ = run(capsys, "predict", "--gpus", "8", "--interconnect", "10gbe",
                       "--gpus-per-host", "1", "--overhead-s", "0.1")
    assert code == 0
    assert "8 GPUs on 8 hosts" in out and "ring bound by eth-10g" in out
    code, out, _ = run(capsys, "predict", "--preset", "resnet50-32gpu-nccl-ib", "--gpus", "64")
    assert code == 0
    assert "(modified: --gpus)" in out and "64 GPUs on 8 hosts" in out


def test_predict_calibrated(capsys, tmp_path):
    rows = []
    for n in (2, 4):
        for size in (8, 4096, 1 << 20, 1 << 26):
            t = scaling.ring_allreduce_time(size, n, 40e-6, 2e9)
            rows.append({"size": size, "count": size // 4, "dtype": "float32", "op": "sum",
                         "world_size": n, "pycomm_us": t * 1e6, "stock_us": 2 * t * 1e6,
                         "stock_backend": "gloo", "ceiling_us": 1.0, "pycomm_busbw": 0.0,
                         "stock_busbw": 0.0, "wrong": 0})
    path = tmp_path / "allreduce.json"
    path.write_text(json.dumps({"rows": rows}))
    code, out, _ = run(capsys, "predict", "--gpus", "4", "--calibrate", str(path),
                       "--backend", "stock", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["calibration"]["alpha_s"] == pytest.approx(80e-6)
    assert data["prediction"]["ring"]["bandwidth_Bps"] == pytest.approx(1e9)
    code, out, _ = run(capsys, "predict", "--gpus", "4", "--calibrate", str(path))
    assert code == 0 and "ring bound by calibrated-pycomm: alpha 40.0 us, B 2.000 GB/s" in out


def test_predict_cpu_hosts(capsys):
    """Issue 30: the CPU links are known (--intra shm was "unknown")."""
    code, out, _ = run(capsys, "predict", "--gpus", "32", "--gpus-per-host", "4", "--intra", "shm",
                       "--interconnect", "gloo-eth-10g", "--step-compute-s", "0.5",
                       "--grad-mb", "40", "--json")
    assert code == 0
    p = json.loads(out)["prediction"]
    assert p["hosts"] == 8 and p["ring"]["bandwidth_Bps"] == pytest.approx(1.24e9)
    code, out, _ = run(capsys, "predict", "--gpus", "32", "--gpus-per-host", "4", "--intra",
                       "shared-memory", "--interconnect", "gloo-ib-hdr", "--hierarchy")
    assert code == 0 and "gloo-ib-hdr" in out


def test_predict_errors(capsys):
    code, _, err = run(capsys, "predict")
    assert code == 2 and "--preset" in err
    code, _, err = run(capsys, "predict", "--gpus", "4", "--interconnect", "smoke-signals")
    assert code == 2 and "unknown 'smoke-signals'" in err
    code, _, err = run(capsys, "predict", "--gpus", "4", "--overlap", "2")
    assert code == 2 and "overlap" in err
    code, _, err = run(capsys, "predict", "--preset", "no-such-preset")
    assert code == 2 and "invalid choice" in err


def test_predict_list(capsys):
    code, out, _ = run(capsys, "predict", "--list")
    assert code == 0
    for name in list(scaling.PRESETS) + ["nvlink3", "ib-hdr", "eth-10g", "pcie4", "shm",
                                         "gloo-loopback", "gloo-eth-10g", "gloo-ib-hdr"]:
        assert name in out


# --------------------------------------------------------------------------- bench

@pytest.mark.parametrize("which,script", [("allreduce", "collectives_perf.py"),
                                          ("collectives", "collectives_perf.py"),
                                          ("ddp", "ddp_resnet50.py")])
def test_bench_missing_script(capsys, tmp_path, which, script):
    code, _, err = run(capsys, "bench", "--bench-dir", str(tmp_path), which, "--json", "x")
    assert code == 2
    assert f"pycomm bench {which}: {tmp_path / script} not found" in err


RECORDER = """
import json, os, sys
json.dump({{"argv": sys.argv, "name": __name__, "file": __file__, "path0": sys.path[0]}},
          open({record!r}, "w"))
sys.exit(3)
"""


@pytest.mark.parametrize("which,fixed", [("allreduce", ["--collective", "all_reduce"]),
                                         ("collectives", [])])
def test_bench_collectives_runs_the_script_as_pycomm_bench(capsys, tmp_path, which, fixed):
    record = tmp_path / "argv.json"
    script = tmp_path / "collectives_perf.py"
    script.write_text(RECORDER.format(record=str(record)))
    for extra in ([], ["--"]):
        code, _, _ = run(capsys, "bench", "--bench-dir", str(tmp_path), which, *extra,
                         "-b", "8", "-e", "1M", "--json", "out.json")
        assert code == 3
        seen = json.loads(record.read_text())
        assert seen["argv"] == [f"pycomm bench {which}", *fixed, "-b", "8", "-e", "1M",
                                "--json", "out.json"]
        # as `python SCRIPT` would run it
        assert seen["name"] == "__main__"
        assert seen["file"] == str(script) and seen["path0"] == str(tmp_path)


def test_bench_allreduce_leaves_the_collective_fixed(capsys, tmp_path):
    (tmp_path / "collectives_perf.py").write_text("raise SystemExit(5)\n")
    for arg in (["--collective", "broadcast"], ["--collective=broadcast"]):
        code, _, err = run(capsys, "bench", "--bench-dir", str(tmp_path), "allreduce", *arg)
        assert code == 2 and "pycomm bench collectives" in err
    code, _, _ = run(capsys, "bench", "--bench-dir", str(tmp_path), "collectives",
                     "--collective", "broadcast")
    assert code == 5


def test_bench_help_names_the_command(capfd, tmp_path):
    script = textwrap.dedent("""
        import argparse
        p = argparse.ArgumentParser(description="a sweep")
        p.add_argument("--collective", default="all_reduce")
        p.add_argument("-b", "--minbytes")
        p.parse_args()
    """)
    (tmp_path / "collectives_perf.py").write_text(script)
    (tmp_path / "ddp_resnet50.py").write_text(script)
    for which in ("allreduce", "collectives", "ddp"):
        code = main(["bench", "--bench-dir", str(tmp_path), which, "--help"])
        out, _ = capfd.readouterr()
        assert code == 0
        assert out.startswith(f"usage: pycomm bench {which} [-h]"), out
        assert "collectives_perf" not in out and "ddp_resnet50" not in out


def test_bench_ranks_spawned_by_the_script_find_its_code(capfd, tmp_path):
    # The benchmarks start their ranks with multiprocessing's spawn, which re-imports the
    # script in each rank: the named run must leave __main__ findable, as `python SCRIPT` does.
    (tmp_path / "collectives_perf.py").write_text(textwrap.dedent("""
        import multiprocessing as mp
        import sys

        def rank(q, r):
            q.put((r, sys.argv[0]))

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            procs = [ctx.Process(target=rank, args=(q, r)) for r in range(2)]
            for p in procs:
                p.start()
            got = sorted(q.get(timeout=60) for _ in procs)
            for p in procs:
                p.join(60)
            print("ranks", got, [p.exitcode for p in procs])
    """))
    code = main(["bench", "--bench-dir", str(tmp_path), "collectives"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "ranks [(0, 'pycomm bench collectives'), (1, 'pycomm bench collectives')] [0, 0]" \
        in out, out + err


def test_bench_allreduce_help_of_the_real_script(capfd):
    assert (REPO / "bench" / "collectives_perf.py").is_file()
    code = main(["bench", "allreduce", "--help"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert out.startswith("usage: pycomm bench allreduce"), out
    assert "--collective" in out and "--json" in out and "collectives_perf.py" not in out


def test_bench_default_dir_is_the_checkouts_bench(capsys, monkeypatch):
    from pycomm.tools import cli

    monkeypatch.delenv("PYCOMM_BENCH_DIR", raising=False)
    calls = []
    monkeypatch.setattr(cli.subprocess, "call", lambda command: calls.append(command) or 0)
    assert main(["bench", "ddp", "--steps", "1"]) == 0
    assert calls == [[sys.executable, "-c", cli._RUN_NAMED, str(REPO / "bench" / "ddp_resnet50.py"),
                      "pycomm bench ddp", "--steps", "1"]]


def test_bench_dir_from_the_setting(capsys, tmp_path, monkeypatch):
    (tmp_path / "ddp_resnet50.py").write_text("raise SystemExit(4)\n")
    monkeypatch.setenv("PYCOMM_BENCH_DIR", str(tmp_path))
    assert run(capsys, "bench", "ddp")[0] == 4
    monkeypatch.setenv("PYCOMM_BENCH_DIR", str(tmp_path / "elsewhere"))
    code, _, err = run(capsys, "bench", "ddp")
    assert code == 2 and "(the folder looked in: PYCOMM_BENCH_DIR)" in err


def test_bench_outside_a_checkout_says_it_needs_one(capsys, tmp_path, monkeypatch):
    """An installed pycomm (site-packages beside no bench/) says where it looked and how to
    point it at a checkout."""
    from pycomm.tools import cli

    monkeypatch.delenv("PYCOMM_BENCH_DIR", raising=False)
    monkeypatch.setattr(cli, "_repo_root", lambda: tmp_path)
    code, _, err = run(capsys, "bench", "allreduce")
    assert code == 2
    assert f"{tmp_path / 'bench' / 'collectives_perf.py'} not found" in err
    assert f"beside pycomm, imported from {tmp_path / 'pycomm'}" in err
    assert "not installed with the package" in err and "--bench-dir" in err
    assert "PYCOMM_BENCH_DIR" in err


def test_bench_runs_script_with_arguments(capsys, tmp_path):
    record = tmp_path / "argv.json"
    (tmp_path / "ddp_resnet50.py").write_text(textwrap.dedent(f"""
        import json, sys
        json.dump(sys.argv[1:], open({str(record)!r}, "w"))
        sys.exit(3)
    """))
    code, _, _ = run(capsys, "bench", "--bench-dir", str(tmp_path), "ddp", "--world-size", "2",
                     "--json", "out.json")
    assert code == 3
    assert json.loads(record.read_text()) == ["--world-size", "2", "--json", "out.json"]


# --------------------------------------------------------------------------- the package

def test_the_version_is_written_once():
    """pycomm/_version.py is the one source: pyproject reads it (statically, as setuptools
    does when it builds), pycomm.__version__ is it, and nothing else states it."""
    import tomllib

    from setuptools.config.expand import read_attr

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert read_attr(attr, root_dir=REPO) == pycomm.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", pycomm.__version__)
    assert "version=" not in (REPO / "setup.py").read_text()


def test_cpu_vector_path_is_the_one_this_cpu_takes():
    """The build's -march=native (setup.py) picks the vector loops this CPU has:
    NEON on every aarch64 CPU, AVX2+F16C on an x86 CPU that has both."""
    if os.environ.get("PYCOMM_MARCH", "native") != "native":
        pytest.skip("PYCOMM_MARCH chose another target than this CPU")
    machine = platform.machine()
    with open("/proc/cpuinfo") as f:
        flags = set(" ".join(line for line in f if line.startswith(("flags", "Features"))).split())
    if machine == "aarch64":
        want = "neon"
    elif machine == "x86_64" and {"avx2", "f16c"} <= flags:
        want = "avx2+f16c"
    else:
        want = "none (scalar loops)"
    assert pycomm.cpu_vector_path() == want, (machine, sorted(flags & {"avx2", "f16c", "asimd"}))


# --------------------------------------------------------------------------- python -m pycomm

def python(*args) -> str:
    """The stdout of `python ARGS` run in the checkout, which must exit 0."""
    done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_python_dash_m(capsys):
    argv = ["predict", "--preset", "resnet50-4xa100"]
    stdout = python("-m", "pycomm", *argv)
    code, out, _ = run(capsys, *argv)
    assert code == 0 and stdout == out         # the same command as pycomm's


def test_doctor_runs_where_the_runtime_cannot_load():
    """Without torch, and so without pycomm._C, `pycomm doctor` still runs, to say why."""
    check = ("import runpy, sys; sys.modules['torch'] = None; "
             "sys.argv = ['pycomm', 'doctor', '--json']; "
             "runpy.run_module('pycomm', run_name='__main__', alter_sys=True)")
    info = json.loads(python("-c", check))
    assert info["torch"].startswith("not importable")
    assert "torch cannot be imported; pycomm needs it" in info["warnings"]
    assert "needs pycomm's runtime, which did not load" in info["pycomm_cuda_built"]


def test_the_runtime_does_not_import_the_tools():
    check = ("import sys, pycomm; import pycomm.comm, pycomm.hooks, pycomm.bucketing, "
             "pycomm.bucket_ops; "
             "print(sorted(m for m in sys.modules if m.startswith('pycomm.tools')))")
    assert python("-c", check).strip() == "[]"
