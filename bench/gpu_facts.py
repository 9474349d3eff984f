"""What bench/gpu_check.sh needs to know before it spends the GPU's minutes: the machine
(GPU, driver, compute and MIG mode, torch, CUDA, NCCL, nvcc, MPS, the tools and Python
packages the steps use, and what each missing one costs), and after the build, pycomm's
CUDA status. Only reads; changes no setting.

    python3 bench/gpu_facts.py machine --json machine.json
    python3 bench/gpu_facts.py pycomm --json pycomm.json   # exit 1 unless pycomm imports with CUDA
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys

# Tools the steps run, and what a missing one costs.
TOOLS = {
    "nvcc": "no build of the CUDA sources",
    "cmake": "no native tests; the threads bench is compiled by nvcc alone",
    "ninja": "setup.py compiles one file at a time (likely past its limit); cmake uses make",
    "compute-sanitizer": "no memcheck or racecheck step",
    "nvidia-cuda-mps-control": "no MPS: no process timings",
    "cuobjdump": "(not used by the check)",
    "ncu": "(not used by the check)",
    "cuda-gdb": "(not used by the check)",
    "nsys": "(not used by the check)",
}
# Python packages the steps import, and what a missing one costs.
PACKAGES = {
    "pytest": "no CUDA IPC tests",
    "numpy": "torch warns; nothing of the check needs it directly",
    "torchvision": "no DDP ResNet-50 steps",
    "hypothesis": "(the selected tests do not use it)",
    "tqdm": "no progress bars in the DDP bench",
    "matplotlib": "no PNG plots (the check asks for none)",
}
GPU_FIELDS = ("name", "driver_version", "compute_mode", "mig.mode.current", "memory.total")


def _run(cmd, timeout=15):
    """stdout of cmd, stripped, or None when it is missing or fails."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def machine():
    facts = dict(python=platform.python_version(), cpus=os.cpu_count())
    with open("/proc/meminfo") as f:
        facts["memory_gib"] = round(int(f.readline().split()[1]) / (1 << 20), 1)
    smi = _run(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader"])
    facts["gpus_smi"] = ([dict(zip(GPU_FIELDS, (v.strip() for v in line.split(","))))
                          for line in smi.splitlines()] if smi else [])
    nvcc = _run(["nvcc", "--version"])
    release = [line for line in (nvcc or "").splitlines() if "release" in line]
    facts["nvcc"] = release[-1].split(",", 1)[-1].strip() if release else None
    facts["tools"] = {t: shutil.which(t) is not None for t in TOOLS}
    facts["packages"] = {p: importlib.util.find_spec(p) is not None for p in PACKAGES}
    try:
        import torch

        from harness.peers.nccl import nccl_version, prepare_nccl, version_text

        facts["torch"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        facts["gpus"] = [dict(name=p.name, capability=f"{p.major}.{p.minor}",
                              sms=p.multi_processor_count,
                              memory_gib=round(p.total_memory / (1 << 30), 1))
                         for p in map(torch.cuda.get_device_properties, range(count))]
        facts["nccl"] = version_text(nccl_version())
        facts["nccl_two_ranks_one_gpu"] = prepare_nccl(2, 1) or "allowed"
    except Exception as e:  # noqa: BLE001 - reported; the build step will fail on it too
        facts["torch"] = f"not importable: {type(e).__name__}: {e}"
    return facts


def machine_lines(f):
    yield f"python {f['python']}, {f['cpus']} CPUs, {f['memory_gib']} GiB"
    for g in f["gpus_smi"] or [None]:
        yield ("GPU (nvidia-smi): none" if g is None else
               f"GPU {g['name']}, driver {g['driver_version']}, {g['memory.total']}, compute mode "
               f"{g['compute_mode']}, MIG {g['mig.mode.current']}")
    for g in f.get("gpus", []):
        yield f"GPU (torch): {g['name']}, sm_{g['capability'].replace('.', '')}, {g['sms']} SMs"
    yield (f"torch {f['torch']}, CUDA {f.get('torch_cuda')}, NCCL {f.get('nccl')} "
           f"(two ranks on one GPU: {f.get('nccl_two_ranks_one_gpu')})")
    yield f"nvcc: {f['nvcc'] or 'not found'}"
    for kind, table in (("tools", TOOLS), ("packages", PACKAGES)):
        have = [k for k, v in f[kind].items() if v]
        yield f"{kind} present: {', '.join(have) or 'none'}"
        for k, v in f[kind].items():
            if not v:
                yield f"{kind} missing: {k}: {table[k]}"


def pycomm_facts():
    import pycomm
    from pycomm.tools import doctor

    return dict(module=os.path.dirname(pycomm.__file__), cuda_built=bool(pycomm.cuda_built()),
                doctor=doctor.format_environment(doctor.environment()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("machine", "pycomm"))
    p.add_argument("--json", metavar="PATH", help="write the facts here")
    args = p.parse_args(argv)
    if args.what == "machine":
        facts = machine()
        print("\n".join(machine_lines(facts)))
        ok = True
    else:
        facts = pycomm_facts()
        print(facts["doctor"])
        ok = facts["cuda_built"]
        if not ok:
            print("pycomm imports but was built without its CUDA sources")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(facts, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
