"""pycomm doctor (pycomm/tools/doctor.py, script_checks.py): the environment it reports and
the training-script mistakes it finds, called in-process through the pycomm command's main()."""
import json
import os

import pytest
import torch

import pycomm
from pycomm.tools.cli import main

pytestmark = pytest.mark.fast


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


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
