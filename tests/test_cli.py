"""The pycomm command (pycomm/tools/cli.py, pycomm/tools/doctor.py), called in-process through
main()."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from pycomm.tools import scaling
from pycomm.tools.cli import main

REPO = Path(__file__).resolve().parent.parent


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- predict

def test_predict_textbook(capsys):
    code, out, _ = run(capsys, "predict", "--preset", "resnet50-4xa100")
    assert code == 0
    assert "S = 3.76 (epoch), efficiency 94.0%" in out
    assert "3125 steps x 0.800 s = 2500.0 s" in out
    assert "782 steps x 0.8500 s = 664.7 s" in out
    assert "quoted 665 s" in out
    assert "1.1% of the gap" in out


def test_predict_32gpu_before_and_after(capsys):
    code, out, _ = run(capsys, "predict", "--preset", "resnet50-32gpu-gloo-ethernet")
    assert code == 0
    assert "vs 4 GPUs  4.20x (ideal 8x" in out
    assert "(45.0% of the step)" in out
    code, out, _ = run(capsys, "predict", "--preset", "resnet50-32gpu-nccl-ib")
    assert code == 0
    assert "vs 4 GPUs  6.80x (ideal 8x" in out
    assert "ring bound by nvlink3+ib-hdr" in out


def test_predict_json(capsys):
    code, out, _ = run(capsys, "predict", "--preset", "resnet50-32gpu-nccl-ib", "--json")
    assert code == 0
    data = json.loads(out)
    p = data["prediction"]
    assert data["scenario"] == "resnet50-32gpu-nccl-ib"
    assert p["gpus"] == 32 and p["hosts"] == 4
    assert round(p["speedup_vs_baseline"], 1) == 6.8
    assert p["ring"]["bandwidth_Bps"] == 25e9


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
    path.write_text(json.dumps(rows))
    code, out, _ = run(capsys, "predict", "--gpus", "4", "--calibrate", str(path),
                       "--backend", "stock", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["calibration"]["alpha_s"] == pytest.approx(80e-6)
    assert data["prediction"]["ring"]["bandwidth_Bps"] == pytest.approx(1e9)
    code, out, _ = run(capsys, "predict", "--gpus", "4", "--calibrate", str(path))
    assert code == 0 and "ring bound by calibrated-pycomm: alpha 40.0 us, B 2.000 GB/s" in out


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
    for name in list(scaling.PRESETS) + ["nvlink3", "ib-hdr", "eth-10g", "pcie4"]:
        assert name in out


# --------------------------------------------------------------------------- bench

def test_bench_missing_script(capsys, tmp_path):
    code, _, err = run(capsys, "bench", "--bench-dir", str(tmp_path), "allreduce", "--json", "x")
    assert code == 2
    assert str(tmp_path / "allreduce_perf.py") in err and "not found" in err


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
    for label in ("torch ", "CUDA ", "NCCL ", "backends ", "CPUs ", "pycomm CUDA "):
        assert label in out
    assert "gloo yes" in out
    assert f"shm          {tmp_path}:" in out
    code, out, _ = run(capsys, "doctor", "--json")
    info = json.loads(out)
    assert info["torch"] == torch.__version__
    assert info["shm"]["dir"] == str(tmp_path) and info["shm"]["free_bytes"] > 0
    assert info["cpus"]["usable"] == len(os.sched_getaffinity(0))
    assert info["backends"]["gloo"] is True
    assert info["pycomm_cuda_built"] in (True, False)
    assert len(info["gpus"]) == torch.cuda.device_count()


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

def test_python_dash_m(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pycomm", "predict", "--preset",
                           "resnet50-4xa100"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "S = 3.76" in done.stdout
