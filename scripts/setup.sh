#!/usr/bin/env bash
# Everything a fresh machine needs, idempotent and quick when already done:
# torch (pinned to the CUDA 13.0 build the machines carry), the test and
# benchmark dependencies, and pycomm's native extension built in place (CPU
# always; CUDA too when a toolkit is found, even without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

have() { "$PY" -c "$1" >/dev/null 2>&1; }

if ! have "import torch, torchvision; assert torch.__version__.startswith('2.14.1') and torchvision.__version__.startswith('0.29.1')"; then
  echo "setup: installing torch 2.14.1 and torchvision 0.29.1"
  "$PY" -m pip install --quiet "torch==2.14.1" "torchvision==0.29.1"
fi
if ! have "import pytest, pytest_timeout, hypothesis, tqdm, matplotlib, ninja, numpy"; then
  echo "setup: installing test and benchmark dependencies"
  "$PY" -m pip install --quiet "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6" tqdm matplotlib ninja numpy "setuptools>=64" wheel
fi
# In place, so that ninja rebuilds only what changed on later runs.
echo "setup: building pycomm's extension (log: build/setup.log)"
mkdir -p build
if ! MAX_JOBS=${MAX_JOBS:-2} "$PY" setup.py build_ext --inplace >build/setup.log 2>&1; then
  grep -E -B2 -A8 "error|Error" build/setup.log | tail -60
  echo "setup: the build failed; the whole log is in build/setup.log" >&2
  exit 1
fi
# The package itself (editable: this checkout) and its `pycomm` command; again
# when the installed one is another checkout's.
here=$(pwd -P)
installed=$(cd / && "$PY" -c "import os, pycomm; print(os.path.dirname(os.path.dirname(os.path.realpath(pycomm.__file__))))" 2>/dev/null || true)
if [ "$installed" != "$here" ] || ! command -v pycomm >/dev/null; then
  echo "setup: installing pycomm (editable)"
  PYCOMM_SKIP_BUILD=1 "$PY" -m pip install --quiet --no-build-isolation --no-deps -e .
fi
"$PY" -c "import pycomm; print('setup: pycomm ready; CUDA kernels built:', pycomm.cuda_built())"
