"""The examples README shows, launched as README launches them: torchrun with
4 ranks, a few steps each (--standalone: the rendezvous takes a free port, so a
run beside another job cannot collide on torchrun's default one)."""
import os
import subprocess

import pytest

from support.torchrun_ranks import torchrun as run_ranks

pytestmark = pytest.mark.examples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANKS = 4


def torchrun(script, *args, ranks=RANKS, folder="examples"):
    """Every rank's stdout, rank by rank (tests/support/torchrun_ranks.py: never interleaved)."""
    try:
        res = run_ranks(os.path.join(ROOT, folder, script), *args, ranks=ranks)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun {script} did not finish in 240 s:\n{e.stdout}\n{e.stderr}")
    assert res.returncode == 0, f"torchrun {script} exited {res.returncode}:\n{res.report()}"
    print(res.stdout.strip().splitlines()[-1])
    return res.stdout


@pytest.mark.parametrize("how", [(), ("--hook",)], ids=["backend", "hook"])
def test_ddp_example(how):
    out = torchrun("ddp_train.py", "--steps", "20", *how)
    last = out.strip().splitlines()[-1]
    assert f"{RANKS} ranks, 20 steps" in last and \
        "parameters bitwise identical on every rank: True" in last, out


def test_tensor_parallel_example():
    out = torchrun("tensor_parallel.py", "--steps", "3")
    assert out.strip().splitlines()[-1].endswith(": OK"), out


def test_symm_mem_example():
    out = torchrun("symm_mem.py", "--numel", "100000")
    lines = [line for line in out.splitlines() if line.startswith("rank ")]
    assert len(lines) == RANKS and all(line.endswith(": OK") for line in lines), out


def test_aarch64_smoke_script_passes_here_too():
    """scripts/aarch64_smoke.py, which scripts/aarch64_python.sh runs on emulated
    aarch64, checks the same on this host: it must not rot where CI cannot run it."""
    out = torchrun("aarch64_smoke.py", ranks=2, folder="scripts")
    lines = [line for line in out.splitlines() if "checks passed (equal to gloo)" in line]
    assert len(lines) == 2 and all(": 58 checks passed" in line for line in lines), out


def test_tp_inference_example():
    """transformers' own tensor parallelism on pycomm (setup.sh installs the pinned
    transformers of the bench extra)."""
    pytest.importorskip("transformers", reason="the bench extra (pip install '.[bench]')")
    out = torchrun("tp_inference.py", "--tokens", "8", "--compile", ranks=2)
    assert out.strip().splitlines()[-1].endswith("tokens equal on every rank: True"), out
    # Compiled with Inductor: the whole model in one graph, the collectives inside it (a
    # graph break at a collective would make more), within float rounding of eager.
    compiled = next(line for line in out.splitlines() if line.startswith("compiled (Inductor)"))
    assert compiled.startswith("compiled (Inductor): 1 graph(s)"), out
    assert compiled.endswith("bitwise equal on every rank: True"), out
    diff = float(compiled.split("logits within ")[1].split(" of eager")[0])
    assert diff < 1e-4, out
