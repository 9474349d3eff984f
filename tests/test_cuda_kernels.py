"""The CUDA build: that the CUDA sources compiled is checked everywhere a CUDA
toolkit exists, since CI builds them without a GPU (the kernels themselves run
in tests/test_cuda_path.py, on a GPU)."""
import os
import shutil

import pytest
import torch

import pycomm

pytestmark = pytest.mark.fast


def test_cuda_sources_were_built_where_a_toolkit_exists():
    toolkit = shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")
    if not toolkit or os.environ.get("PYCOMM_CUDA") == "0":
        pytest.skip("no CUDA toolkit here, or PYCOMM_CUDA=0")
    if torch.version.cuda is None:
        pytest.skip(f"torch {torch.__version__} is a CPU build: setup.py builds no CUDA sources for it")
    assert pycomm.cuda_built()
