"""PyTorch's own distributed suite on pycomm, as on gloo.

The torch wheel ships the suite PyTorch runs against gloo, NCCL and UCC
(`torch/testing/_internal/distributed/distributed_test.py`). This runs all of
it, on gloo and then on pycomm, at world size 3, in ranks that live across the
tests (tests/torch_suite/: about a minute per backend on 2 cores, where one
spawn per test takes half an hour), and holds pycomm to gloo's outcome test by
test. The tests whose outcome differs for a reason that is torch's, not
pycomm's, are listed with it in tests/torch_suite/differences.py.
"""
import pytest
import torch

from torch_suite.differences import differences_for
from torch_suite.runner import compare, run_suite

pytestmark = pytest.mark.torch_suite

pytest.importorskip("expecttest")  # the suite imports it (scripts/setup.sh installs it)


@pytest.mark.timeout(1800)
def test_pytorch_distributed_suite_ends_on_pycomm_as_on_gloo():
    gloo = run_suite("gloo")
    pycomm = run_suite("pycomm")
    line, problems = compare(gloo, pycomm, differences_for(torch.__version__))
    print(f"[suite] {line}")
    assert any(o.status == "pass" for o in gloo), "the suite ran no test on gloo"
    assert not problems, f"{len(problems)} tests end otherwise on pycomm than on gloo:\n\n" + \
        "\n\n".join(p[:4000] for p in problems)
