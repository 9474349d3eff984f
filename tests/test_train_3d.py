"""examples/train_3d.py as its docstring launches it: torchrun with 8 ranks in a 2 x 2 x 2
(dp, pp, tp) mesh, a few steps. The example checks itself (losses against one process, the dp
ranks' parameters bitwise, the model's tp all-reduce count against DTensor's) and says OK on
its last line; this test reads that line and the figures before it."""
import os
import re
import subprocess

import pytest

from support.torchrun_ranks import torchrun

pytestmark = pytest.mark.examples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 4


def test_train_3d_example():
    schedule = "1f1b"
    try:
        res = torchrun(os.path.join(ROOT, "examples", "train_3d.py"), "--steps", str(STEPS),
                       "--schedule", schedule, "--calibration-repeats", "3", ranks=8)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun train_3d.py did not finish in 240 s:\n{e.stdout}\n{e.stderr}")
    out = res.stdout
    assert res.returncode == 0, f"exited {res.returncode}:\n{res.report()}"
    last = out.strip().splitlines()[-1]
    print(last)
    assert last.startswith(f"3D parallel dp 2 x pp 2 x tp 2 (FSDP2, {schedule}, TP)"), out
    assert f"{STEPS} steps" in last and "dp ranks bitwise identical: True" in last, out
    assert last.endswith(": OK"), out
    # The loss falls, and its first steps are those of one process within the tolerance.
    first, final = map(float, re.search(r"loss ([0-9.]+) -> ([0-9.]+)", last).groups())
    assert final < first, last
    worst = float(re.search(r"within ([0-9.e+-]+) of one process", last).group(1))
    assert worst <= 1e-9, last
    # The model's table for this layout: 2 layers a stage make 8 tp all-reduces a microbatch,
    # 4 microbatches make 32 a step, and 1F1B's bubble over 2 stages is 1/5 of the pipeline.
    assert "8 counted (CommDebugMode), 8 in the model" in out, out
    assert re.search(r"\n  tp +2 .* 32 x 8 KiB all-reduce", out), out
    assert "(p-1)/(m+p-1) = 1/5 = 20.0%" in out, out
    measured, predicted = map(float, re.search(
        r"step ([0-9.]+) ms measured, ([0-9.]+) ms predicted", last).groups())
    assert measured > 0 and predicted > 0
