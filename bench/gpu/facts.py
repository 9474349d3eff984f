"""What bench/gpu_check.sh needs to know before it spends the GPU's minutes, in the order
that the least can go wrong: the host (Python and its headers, CPUs, memory, nvcc, the
tools and Python packages the steps use, and what each missing one costs) with neither
torch nor the GPU; the GPU's fields from nvidia-smi; torch's view (CUDA, the devices,
NCCL); and after the build, pycomm's CUDA status. Only reads; changes no setting.

    python3 -m bench.gpu.facts host --json machine.json     # needs neither torch nor the GPU
    python3 -m bench.gpu.facts smi --json machine.json      # adds nvidia-smi's fields
    python3 -m bench.gpu.facts torch --json torch.json      # imports torch, starts CUDA
    python3 -m bench.gpu.facts machine --json machine.json  # all three, by hand
    python3 -m bench.gpu.facts pycomm --json pycomm.json    # exit 1 unless pycomm imports with CUDA

--json files are rewritten after each fact that may be slow to come (a cold import of
torch, NCCL's loading, the first CUDA call of a fresh machine), so that a run cut short
by its time limit keeps what it found; "unfinished" names what it was waiting for.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig

# Tools the steps run, and what a missing one costs.
TOOLS = {
    "nvcc": "no build of the CUDA sources",
    "cmake": "no native tests; the threads bench is compiled by nvcc alone",
    "ninja": "setup.py compiles one file at a time (likely past its limit); cmake uses make",
    "compute-sanitizer": "no memcheck, initcheck or synccheck step",
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
# nvidia-smi runs after `nvidia-smi -L` has answered (gpu_check.sh), so the driver is up.
SMI_TIMEOUT_S = 5


def _run(cmd, timeout=15):
    """stdout of cmd, stripped, or None when it is missing or fails."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


class Facts(dict):
    """A dict that rewrites its JSON file whenever it changes. The rewrite is atomic, so a
    reader (summary.py, after every step) never sees half a file; the file's facts
    from an earlier command are kept."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        if path and os.path.exists(path):
            try:
                with open(path) as f:
                    self.update(json.load(f))
            except (OSError, ValueError):
                pass  # a file left unreadable is rewritten whole

    def set(self, **facts):
        self.update(facts)
        if self.path:
            tmp = f"{self.path}.tmp{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(self, f, indent=1)
            os.replace(tmp, self.path)

    def waiting_for(self, what):
        self.set(unfinished=what)

    def done(self):
        self.pop("unfinished", None)
        self.set()


def python_headers():
    """(the path of Python.h for this interpreter, whether it is there): torch extensions
    include it, and a Python without its development package lacks it."""
    path = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    return path, os.path.exists(path)


def host(facts):
    """What needs neither torch nor the GPU: the checks that decide which steps can run."""
    headers, have_headers = python_headers()
    facts.set(python=platform.python_version(), python_executable=sys.executable,
              python_headers=headers, python_headers_present=have_headers, cpus=os.cpu_count(),
              tools={t: shutil.which(t) is not None for t in TOOLS},
              packages={p: importlib.util.find_spec(p) is not None for p in PACKAGES})
    with open("/proc/meminfo") as f:
        facts.set(memory_gib=round(int(f.readline().split()[1]) / (1 << 20), 1))
    facts.waiting_for("nvcc --version")
    nvcc = _run(["nvcc", "--version"])
    release = [line for line in (nvcc or "").splitlines() if "release" in line]
    facts.set(nvcc=release[-1].split(",", 1)[-1].strip() if release else None)
    # The compiler the build will use (torch's extension builder takes $CXX, else c++): the
    # first GPU run's build used /opt/gcc's, and an argument check that threw crashed there.
    cxx = shutil.which(os.environ.get("CXX", "c++"))
    version = _run([cxx, "--version"]) if cxx else None
    facts.set(cxx=f"{cxx}: {version.splitlines()[0]}" if version else None,
              libc=" ".join(platform.libc_ver()), nccl_carried=carried_nccl_loads())
    facts.done()


def carried_nccl_loads():
    """Whether the NCCL a call carried (bench/gpu/build_nccl.sh) loads on this machine: built
    elsewhere, it may need newer system libraries than this one has (then the nccl_build
    step builds it here)."""
    import ctypes

    from ..harness.peers.nccl import carried_path

    path = carried_path()
    if not os.path.exists(path):
        return "not carried"
    try:
        ctypes.CDLL(path)
    except OSError as e:
        return f"does NOT load: {e} (bench/gpu_check.sh --steps nccl_build,... builds it here)"
    return "loads"


def smi(facts, timeout=SMI_TIMEOUT_S):
    facts.waiting_for("nvidia-smi --query-gpu")
    out = _run(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader"],
               timeout=timeout)
    facts.set(gpus_smi=[dict(zip(GPU_FIELDS, (v.strip() for v in line.split(","))))
                        for line in out.splitlines()] if out else [])
    facts.done()


def torch_facts(facts):
    """torch's view, each part written as it comes: a cold import of torch, the first CUDA
    call and loading NCCL can each take many seconds on a fresh machine."""
    facts.waiting_for("import torch")
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - reported; the build step will fail on it too
        facts.set(torch=f"not importable: {type(e).__name__}: {e}")
        facts.done()
        return
    built_with = re.search(r"GCC (\S+)", torch.__config__.show())
    facts.set(torch=torch.__version__, torch_cuda=torch.version.cuda,
              torch_gcc=built_with.group(1) if built_with else None)
    facts.waiting_for("CUDA devices (torch.cuda.get_device_properties)")
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        facts.set(gpus=[dict(name=p.name, capability=f"{p.major}.{p.minor}",
                             sms=p.multi_processor_count,
                             memory_gib=round(p.total_memory / (1 << 30), 1))
                        for p in map(torch.cuda.get_device_properties, range(count))])
    except Exception as e:  # noqa: BLE001 - a CUDA that does not start is the fact
        facts.set(gpus=[], cuda_error=f"{type(e).__name__}: {e}")
    facts.waiting_for("NCCL's version (loads NCCL)")
    try:
        from ..harness.peers.nccl import prepare_nccl, which_text

        facts.set(nccl=which_text())
        facts.set(nccl_two_ranks_one_gpu=prepare_nccl(2, 1) or "allowed")
    except Exception as e:  # noqa: BLE001
        facts.set(nccl=f"unknown: {type(e).__name__}: {e}")
    facts.done()


def host_lines(f):
    headers = "" if f.get("python_headers_present", True) else (
        f"; NO Python.h at {f.get('python_headers')}: no build")
    yield f"python {f['python']}, {f['cpus']} CPUs, {f.get('memory_gib', '?')} GiB{headers}"
    yield f"nvcc: {f.get('nvcc') or 'not found'}; c++: {f.get('cxx') or 'not found'}; {f.get('libc')}"
    yield f"carried NCCL (bench/out/nccl): {f.get('nccl_carried')}"
    for kind, table in (("tools", TOOLS), ("packages", PACKAGES)):
        have = [k for k, v in f[kind].items() if v]
        yield f"{kind} present: {', '.join(have) or 'none'}"
        for k, v in f[kind].items():
            if not v:
                yield f"{kind} missing: {k}: {table[k]}"


def smi_lines(f):
    for g in f.get("gpus_smi") or [None]:
        yield ("GPU (nvidia-smi): none" if g is None else
               f"GPU {g['name']}, driver {g['driver_version']}, {g['memory.total']}, compute mode "
               f"{g['compute_mode']}, MIG {g['mig.mode.current']}")


def torch_lines(f):
    for g in f.get("gpus", []):
        yield f"GPU (torch): {g['name']}, sm_{g['capability'].replace('.', '')}, {g['sms']} SMs"
    if f.get("cuda_error"):
        yield f"CUDA did not start: {f['cuda_error']}"
    yield (f"torch {f.get('torch')} (built with GCC {f.get('torch_gcc')}), CUDA "
           f"{f.get('torch_cuda')}, NCCL {f.get('nccl')} (two ranks on one GPU: "
           f"{f.get('nccl_two_ranks_one_gpu')})")


def pycomm_facts():
    import pycomm
    from pycomm.tools import doctor

    return dict(module=os.path.dirname(pycomm.__file__), cuda_built=bool(pycomm.cuda_built()),
                doctor=doctor.format_environment(doctor.environment()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("host", "smi", "torch", "machine", "pycomm"))
    p.add_argument("--json", metavar="PATH", help="write the facts here (kept up to date)")
    args = p.parse_args(argv)
    if args.what == "pycomm":
        facts = pycomm_facts()
        print(facts["doctor"])
        if not facts["cuda_built"]:
            print("pycomm imports but was built without its CUDA sources")
        if args.json:
            Facts(args.json).set(**facts)
        return 0 if facts["cuda_built"] else 1
    if args.what in ("torch", "machine"):
        from ..harness.peers.nccl import use_carried

        preload = os.environ.get("LD_PRELOAD")
        if use_carried() and os.environ.get("LD_PRELOAD") != preload:
            # torch's facts as the benches' ranks will have them: with the carried NCCL.
            os.execv(sys.executable, [sys.executable, "-m", "bench.gpu.facts", *sys.argv[1:]])
    facts = Facts(args.json)
    parts = dict(host=(host, host_lines), smi=(smi, smi_lines), torch=(torch_facts, torch_lines))
    for name in parts if args.what == "machine" else (args.what,):
        gather, lines = parts[name]
        gather(facts)
        print("\n".join(lines(facts)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
