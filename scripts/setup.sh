#!/usr/bin/env bash
# Everything a fresh machine needs, idempotent and quick when already done:
# torch (kept when one pycomm supports, 2.11 or newer, is installed; else
# 2.14.1, the CUDA 13.0 build the CI machines carry), the test and benchmark
# dependencies, and pycomm's native extension built in place against that
# torch (CPU always; CUDA too when a toolkit is found, even without a GPU;
# PYCOMM_CUDA=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

have() { "$PY" -c "$1" >/dev/null 2>&1; }

# The torch releases pycomm supports: from OLDEST_TORCH on (CI builds and
# tests TESTED_TORCH, runs the suite again on 2.13.0 and compiles the glue
# against 2.11.0's headers; the GPU machine carries 2.11.0). An installed torch
# in that range stays: the extension builds against the torch that is present,
# as every torch extension does.
OLDEST_TORCH=2.11.0
TESTED_TORCH=2.14.1
torch_version=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null || true)
if [ -z "$torch_version" ] || ! "$PY" -c "import sys; v = lambda s: tuple(int(x) for x in s.split('.')[:3] if x.isdigit()); sys.exit(v('$torch_version') < v('$OLDEST_TORCH'))"; then
  echo "setup: installing torch $TESTED_TORCH (found: ${torch_version:-none}; pycomm needs >= $OLDEST_TORCH)"
  "$PY" -m pip install --quiet "torch==$TESTED_TORCH"
  torch_version=$TESTED_TORCH
elif [ "$torch_version" != "$TESTED_TORCH" ]; then
  echo "setup: keeping torch $torch_version (tested: $TESTED_TORCH; building against $torch_version)"
fi
# torchvision for the ResNet-50 benchmark: the release that matches this torch.
if ! have "import torchvision"; then
  echo "setup: installing the torchvision that matches torch $torch_version"
  "$PY" -m pip install --quiet torchvision "torch==$torch_version"
fi
# expecttest: PyTorch's distributed suite (tests/torch_suite) imports it.
if ! have "import pytest, pytest_timeout, hypothesis, expecttest, tqdm, matplotlib, ninja, numpy"; then
  echo "setup: installing test and benchmark dependencies"
  "$PY" -m pip install --quiet "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6" expecttest tqdm matplotlib ninja numpy "setuptools>=64" wheel
fi
# torchft (tests/test_torchft.py: pycomm as torchft's process group) and parameterized, which
# torchft's own integration tests import. torchft asks for torch>=2.7: installed --no-deps so
# that it can never change the torch above, then its other dependencies by name.
if ! have "import torchft, parameterized"; then
  echo "setup: installing torchft 0.2.0 (torch kept as it is) and parameterized"
  "$PY" -m pip install --quiet --no-deps "torchft==0.2.0"
  "$PY" -m pip install --quiet "opentelemetry-api>=1.39.0" "opentelemetry-sdk>=1.39.0" \
    "opentelemetry-exporter-otlp-proto-http>=1.39.0" parameterized
fi
# cuobjdump, with which tests/test_cuda_codegen.py reads the built kernels'
# registers, stack frames and PTX: NVIDIA's wheel where the toolkit lacks it.
if ! have "import transformers, accelerate; assert transformers.__version__ == '5.23.0'"; then
  echo "setup: installing transformers and accelerate (the bench extra: tensor-parallel inference)"
  "$PY" -m pip install --quiet "transformers==5.23.0" "accelerate==1.16.0"
fi
if [ "${PYCOMM_CUDA:-1}" != 0 ] && { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   ! command -v cuobjdump >/dev/null && [ ! -x /usr/local/cuda/bin/cuobjdump ] &&
   ! have "import importlib.metadata as m; m.version('nvidia-cuda-cuobjdump')"; then
  echo "setup: installing cuobjdump (the CUDA toolkit here has none)"
  "$PY" -m pip install --quiet "nvidia-cuda-cuobjdump>=13,<14"
fi
# In place, so that ninja rebuilds only what changed on later runs.
echo "setup: building pycomm's extension (log: build/setup.log)"
mkdir -p build
if ! MAX_JOBS=${MAX_JOBS:-2} "$PY" setup.py build_ext --inplace >build/setup.log 2>&1; then
  grep -E -B2 -A8 "error|Error" build/setup.log | tail -60
  echo "setup: the build failed; the whole log is in build/setup.log" >&2
  exit 1
fi
# setup.py's one line on the CUDA sources: built (and why), or skipped.
sed -n 's/^pycomm-build: /setup: /p' build/setup.log | head -1
# The package itself (editable: this checkout) and its `pycomm` command; again
# when the installed one is another checkout's.
here=$(pwd -P)
installed=$(cd / && "$PY" -c "import os, pycomm; print(os.path.dirname(os.path.dirname(os.path.realpath(pycomm.__file__))))" 2>/dev/null || true)
if [ "$installed" != "$here" ] || ! command -v pycomm >/dev/null; then
  echo "setup: installing pycomm (editable)"
  PYCOMM_SKIP_BUILD=1 "$PY" -m pip install --quiet --no-build-isolation --no-deps -e .
fi
"$PY" -c "import pycomm, torch; print(f'setup: pycomm ready on torch {torch.__version__}')"
