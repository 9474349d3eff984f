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

    calls = []
    monkeypatch.setattr(cli.subprocess, "call", lambda command: calls.append(command) or 0)
    assert main(["bench", "ddp", "--steps", "1"]) == 0
    assert calls == [[sys.executable, "-c", cli._RUN_NAMED, str(REPO / "bench" / "ddp_resnet50.py"),
                      "pycomm bench ddp", "--steps", "1"]]


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


# --------------------------------------------------------------------------- doctor

def test_doctor_environment(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PYCOMM_SHM_DIR", str(tmp_path))
    code, out, _ = run(capsys, "doctor")
    assert code == 0
    assert f"pycomm       {pycomm.__version__} (" in out
    for label in ("torch ", "CUDA ", "NCCL ", "backends ", "CPUs ", "pycomm CUDA ", "pycomm CPU "):
        assert label in out
    assert "gloo yes" in out
    assert f"shm          {tmp_path}:" in out
    # Which transport a group takes here, and what a group costs by its size.
    assert "transport    memfd (PYCOMM_SHM_TRANSPORT=auto)" in out
    assert "group memory  8 ranks: 16.0 MiB (2.0 MiB a rank)" in out
    monkeypatch.setenv("PYCOMM_SHM_TRANSPORT", "posix")
    code, out, _ = run(capsys, "doctor")
    assert "transport    posix (PYCOMM_SHM_TRANSPORT=posix): files in PYCOMM_SHM_DIR" in out
    monkeypatch.delenv("PYCOMM_SHM_TRANSPORT")
    code, out, _ = run(capsys, "doctor", "--json")
    info = json.loads(out)
    assert info["pycomm"] == pycomm.__version__
    assert info["torch"] == torch.__version__
    assert info["shm"]["dir"] == str(tmp_path) and info["shm"]["free_bytes"] > 0
    assert info["cpus"]["usable"] == len(os.sched_getaffinity(0))
    assert info["backends"]["gloo"] is True
    assert info["pycomm_cuda_built"] in (True, False)
    assert info["pycomm_cpu_vectors"] == pycomm.cpu_vector_path()
    assert len(info["gpus"]) == torch.cuda.device_count()


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


def test_doctor_says_what_cuda_means_without_a_gpu():
    from pycomm.tools import doctor

    info = {"python": "3.11", "platform": "Linux", "torch": "2.14.1+cu130", "cuda_runtime": "13.0",
            "nccl": "2.30.7", "backends": {"gloo": True, "nccl": True, "mpi": False, "ucc": False},
            "shm": {"dir": "/dev/shm", "total_bytes": 1 << 34, "free_bytes": 1 << 34},
            "cpus": {"online": 2, "usable": 2}, "gpus": [], "peer_access": {},
            "pycomm_cuda_built": True, "env": {}, "warnings": []}
    out = doctor.format_environment(info)
    assert "GPUs         none visible" in out
    for line in out.splitlines():
        if line.startswith(("CUDA ", "NCCL ", "pycomm CUDA ")) or "nccl yes" in line:
            assert "GPU" in line, f"{line!r} does not say that no GPU is visible"
    gpu = {"index": 0, "name": "H200", "capability": "9.0", "memory_bytes": 1 << 37}
    out = doctor.format_environment(dict(info, gpus=[gpu]))
    assert "nccl yes," in out and "cannot run here" not in out


DDP_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
"""

SCRIPTS = {
    # name: (source after DDP_HEAD, expected {code: line})
    "bn-bad": ("""\
dist.init_process_group("nccl")
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
model = DDP(model)
""", {"batchnorm-not-synced": 6}),
    "bn-torchvision-bad": ("""\
import torchvision
dist.init_process_group("nccl")
model = DDP(torchvision.models.resnet50())
""", {"batchnorm-not-synced": 7}),
    "bn-good": ("""\
dist.init_process_group("nccl")
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
model = DDP(torch.nn.SyncBatchNorm.convert_sync_batchnorm(model))
""", {}),
    "loader-bad": ("""\
dist.init_process_group("nccl")
loader = DataLoader(dataset, batch_size=256, shuffle=True)
""", {"dataloader-without-distributed-sampler": 6}),
    "loader-good": ("""\
dist.init_process_group("nccl")
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=256, sampler=sampler)
for epoch in range(3):
    sampler.set_epoch(epoch)
""", {}),
    "loader-no-set-epoch": ("""\
dist.init_process_group("nccl")
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=256, sampler=sampler, shuffle=True)
""", {"sampler-without-set-epoch": 6, "dataloader-sampler-and-shuffle": 7}),
    "gloo-cuda-bad": ("""\
dist.init_process_group(backend="gloo")
model = DDP(torch.nn.Linear(4, 4).cuda())
""", {"gloo-with-cuda": 5}),
    "gloo-cuda-string-bad": ("""\
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(4, 4).to(f"cuda:{rank}"))
""", {"gloo-with-cuda": 5}),
    "nccl-cuda-good": ("""\
dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(4, 4).cuda())
""", {}),
    "gloo-cpu-good": ("""\
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(4, 4))
""", {}),
    # A collective only some ranks make: the others never enter it.
    "rank0-collective-bad": ("""\
dist.init_process_group("gloo")
rank = dist.get_rank()
loss = torch.zeros(1)
if rank == 0:
    dist.all_reduce(loss)
    print(loss)
""", {"collective-under-rank-condition": 9}),
    "rank-else-collective-bad": ("""\
import pycomm
dist.init_process_group("cpu:pycomm")
if dist.get_rank() != 0:
    pass
else:
    pycomm.barrier()
""", {"collective-under-rank-condition": 10}),
    "main-process-collective-bad": ("""\
dist.init_process_group("gloo")
if local_rank in (-1, 0):
    torch.save(model.state_dict(), "x.pt")
    dist.barrier()
""", {"collective-under-rank-condition": 8}),
    "rank-condition-good": ("""\
from functools import reduce
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.zeros(4)
if rank == 0:
    dist.broadcast(t, 0)        # every rank, in both branches
else:
    dist.broadcast(t, 0)
if rank == 0:
    dist.send(t, 1)             # point-to-point differs by rank on purpose
elif rank == 1:
    dist.recv(t, 0)
if args.local_rank != -1:       # distributed at all: the same on every rank
    dist.barrier()
if rank == 0:
    total = reduce(lambda a, b: a + b, [1, 2])   # functools.reduce, not dist.reduce
dist.all_reduce(t)
if rank == 0:
    print(t)
""", {}),
    "pycomm-not-imported-bad": ("""\
dist.init_process_group("cpu:pycomm")
model = DDP(torch.nn.Linear(4, 4))
""", {"pycomm-backend-not-imported": 5}),
    "pycomm-imported-good": ("""\
import pycomm
dist.init_process_group(backend="cpu:pycomm,cuda:nccl")
model = DDP(torch.nn.Linear(4, 4))
""", {}),
    "cpu-spawn-bad": ("""\
import torch.multiprocessing as mp
def main(rank, world):
    dist.init_process_group("gloo", rank=rank, world_size=world)
    DDP(torch.nn.Linear(4, 4))
mp.spawn(main, args=(4,), nprocs=4)
""", {"cpu-ranks-oversubscribe-cores": 9}),
    "cpu-spawn-good": ("""\
import torch.multiprocessing as mp
def main(rank, world):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    DDP(torch.nn.Linear(4, 4))
mp.spawn(main, args=(4,), nprocs=4)
""", {}),
    "gpu-spawn-good": ("""\
import torch.multiprocessing as mp
def main(rank, world):
    dist.init_process_group("nccl", rank=rank, world_size=world)
    DDP(torch.nn.Linear(4, 4).cuda(rank), device_ids=[rank])
mp.spawn(main, args=(4,), nprocs=4)
""", {}),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_doctor_script(capsys, tmp_path, name):
    body, expected = SCRIPTS[name]
    script = tmp_path / f"{name}.py"
    script.write_text(DDP_HEAD + body)
    code, out, _ = run(capsys, "doctor", str(script))
    assert code == (1 if expected else 0)
    for what, line in expected.items():
        assert f"{script}:{line}: [{what}]" in out
    if not expected:
        assert "no common mistakes found" in out
    code, out, _ = run(capsys, "doctor", "--json", str(script))
    found = {(f["code"], f["line"]) for f in json.loads(out)[str(script)]}
    assert found == set(expected.items())
    assert all(f["why"] and f["fix"] for f in json.loads(out)[str(script)])


def test_doctor_says_rank_on_cpu_and_gpu_on_cuda(capsys, tmp_path):
    """A CPU script's ranks are processes, not GPUs: the findings say so."""
    bn = ('dist.init_process_group("gloo")\n'
          "model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)){})\n"
          "loader = DataLoader(dataset, batch_size=32)\n")
    for suffix, unit, other in (("", "per-rank batch", "per-GPU"), (".cuda()", "per-GPU batch",
                                                                     "per-rank")):
        script = tmp_path / "bn.py"
        script.write_text(DDP_HEAD + bn.format(suffix))
        code, out, _ = run(capsys, "doctor", str(script))
        assert code == 1 and unit in out and other not in out, out
        assert ("on N ranks processes" if not suffix else "on N GPUs processes") in out


def test_doctor_single_process_script_is_clean(capsys, tmp_path):
    script = tmp_path / "local.py"
    script.write_text("import torch\nfrom torch.utils.data import DataLoader\n"
                      "m = torch.nn.BatchNorm2d(3).cuda()\nl = DataLoader(ds, batch_size=4)\n")
    code, out, _ = run(capsys, "doctor", str(script))
    assert code == 0 and "no common mistakes" in out


def test_doctor_does_not_run_the_script(capsys, tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "side_effect.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    code, _, _ = run(capsys, "doctor", str(script))
    assert code == 0 and not marker.exists()


def test_doctor_unreadable_scripts(capsys, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    code, _, err = run(capsys, "doctor", str(broken))
    assert code == 2 and "broken.py:1: does not parse" in err
    code, _, err = run(capsys, "doctor", str(tmp_path / "missing.py"))
    assert code == 2 and "cannot read" in err


# --------------------------------------------------------------------------- python -m pycomm

def test_python_dash_m(capsys):
    argv = ["predict", "--preset", "resnet50-4xa100"]
    done = subprocess.run([sys.executable, "-m", "pycomm", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    code, out, _ = run(capsys, *argv)
    assert code == 0 and done.stdout == out         # the same command as pycomm's


def test_doctor_runs_where_the_runtime_cannot_load():
    """Without torch, and so without pycomm._C, `pycomm doctor` still runs, to say why."""
    check = ("import runpy, sys; sys.modules['torch'] = None; "
             "sys.argv = ['pycomm', 'doctor', '--json']; "
             "runpy.run_module('pycomm', run_name='__main__', alter_sys=True)")
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["torch"].startswith("not importable")
    assert "torch cannot be imported; pycomm needs it" in info["warnings"]
    assert "needs pycomm's runtime, which did not load" in info["pycomm_cuda_built"]


def test_the_runtime_does_not_import_the_tools():
    check = ("import sys, pycomm; import pycomm.comm, pycomm.hooks, pycomm.bucketing, "
             "pycomm.bucket_ops; "
             "print(sorted(m for m in sys.modules if m.startswith('pycomm.tools')))")
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
