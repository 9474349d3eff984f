"""The CUDA build and the reduction kernel. The kernel runs only on a GPU
(skipped cleanly elsewhere); that it compiled is checked everywhere a CUDA
toolkit exists, since CI builds the CUDA sources without a GPU."""
import os
import shutil

import pytest
import torch

import pycomm

pytestmark = pytest.mark.fast

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_cuda_sources_were_built_where_a_toolkit_exists():
    toolkit = shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")
    if not toolkit or os.environ.get("PYCOMM_CUDA") == "0":
        pytest.skip("no CUDA toolkit here, or PYCOMM_CUDA=0")
    if torch.version.cuda is None:
        pytest.skip(f"torch {torch.__version__} is a CPU build: setup.py builds no CUDA sources for it")
    assert pycomm.cuda_built()


@pytest.mark.parametrize("n", [0, 1, 7, 1023, (1 << 20) + 3])
def test_sum_into_cpu(n):
    a = torch.arange(n, dtype=torch.float32)
    b = torch.full((n,), 0.5)
    out = torch.ops.pycomm.sum_into_(a, b)
    assert out is a or out.data_ptr() == a.data_ptr()
    assert torch.equal(a, torch.arange(n, dtype=torch.float32) + 0.5)


def test_sum_into_opcheck_cpu():
    torch.library.opcheck(torch.ops.pycomm.sum_into_.default, (torch.randn(33), torch.randn(33)),
                          test_utils=("test_schema", "test_autograd_registration"))


def test_sum_into_rejects_bad_input():
    with pytest.raises(TypeError, match="float32"):
        torch.ops.pycomm.sum_into_(torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="sizes differ"):
        torch.ops.pycomm.sum_into_(torch.zeros(3), torch.zeros(4))


@needs_gpu
@pytest.mark.parametrize("n", [1, 7, 1023, (1 << 20) + 3])
def test_sum_into_cuda_matches_cpu(n):
    a = torch.randn(n)
    b = torch.randn(n)
    want = a.clone()
    torch.ops.pycomm.sum_into_(want, b)
    got = a.cuda()
    torch.ops.pycomm.sum_into_(got, b.cuda())
    assert torch.equal(got.cpu(), want)


@needs_gpu
def test_sum_into_opcheck_cuda():
    torch.library.opcheck(torch.ops.pycomm.sum_into_.default,
                          (torch.randn(33, device="cuda"), torch.randn(33, device="cuda")),
                          test_utils=("test_schema", "test_autograd_registration"))
