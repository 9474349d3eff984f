"""The examples README shows, launched as README launches them: torchrun with
4 ranks, a few steps each (--standalone: the rendezvous takes a free port, so a
run beside another job cannot collide on torchrun's default one)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANKS = 4


def torchrun(script, *args, ranks=RANKS, folder="examples"):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", str(ranks), os.path.join(ROOT, folder, script), *args]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun {script} did not finish in 240 s:\n{e.stdout}\n{e.stderr}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"torchrun {script} exited {proc.returncode}:\n{out[-6000:]}"
    print(proc.stdout.strip().splitlines()[-1])
    return proc.stdout


@pytest.mark.parametrize("how", [(), ("--hook",)], ids=["backend", "hook"])
def test_ddp_example(how):
    out = torchrun("ddp_train.py", "--steps", "20", *how)
    last = out.strip().splitlines()[-1]
    assert f"{RANKS} ranks, 20 steps" in last and \
        "parameters bitwise identical on every rank: True" in last, out


def test_tensor_parallel_example():
    out = torchrun("tensor_parallel.py", "--steps", "3")
    assert out.strip().splitlines()[-1].endswith(": OK"), out


def test_aarch64_smoke_script_passes_here_too():
    """scripts/aarch64_smoke.py, which scripts/aarch64_python.sh runs on emulated
    aarch64, checks the same on this host: it must not rot where CI cannot run it."""
    out = torchrun("aarch64_smoke.py", ranks=2, folder="scripts")
    lines = [line for line in out.splitlines() if "checks passed (equal to gloo)" in line]
    assert len(lines) == 2 and all(": 58 checks passed" in line for line in lines), out
