"""Running a bench/ driver from a test, through its command line on CPU ranks: in a session
of its own, so that a hang ends with every rank (and mpirun) it started, and the test fails
with the driver's output when it hangs or exits non-zero."""
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from harness.launch import run_in_session  # noqa: E402


def run_script(script: str, args, cwd, timeout_s: float):
    """(stdout, stderr) of `python3 bench/<script> <args>` run in `cwd`."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, str(BENCH / script), *map(str, args)]
    returncode, stdout, stderr = run_in_session(cmd, timeout_s, cwd=cwd, env=env)
    if returncode is None:
        pytest.fail(f"{script} did not finish in {timeout_s} s\nstdout:\n{stdout}\n"
                    f"stderr:\n{stderr[-4000:]}")
    assert returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr[-4000:]}"
    return stdout, stderr
