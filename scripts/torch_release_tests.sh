#!/usr/bin/env bash
# Builds pycomm against another torch release and runs pytest on it, apart
# from the main set-up: a virtual environment of its own (cached in
# ~/.cache/pycomm/venv-torch-VERSION) with that torch and the test
# dependencies, and a copy of this checkout in build/torch-VERSION/src whose
# extension is built in place there (objects kept in build/torch-VERSION/temp,
# so a second run rebuilds only what changed). The checkout's own build is
# left alone. torchvision is not installed: PyPI's wheels are CUDA builds that
# do not load on a CPU torch, so the tests that train a torchvision model
# must be deselected by the caller.
#   Usage: scripts/torch_release_tests.sh VERSION [PYTEST ARGS...]    e.g. 2.13.0 -x
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: $0 VERSION [PYTEST ARGS...]" >&2; exit 2; }
version=$1
shift
here=$(pwd -P)
venv=${XDG_CACHE_HOME:-$HOME/.cache}/pycomm/venv-torch-$version
py=$venv/bin/python
work=$here/build/torch-$version

if ! "$py" -c "import torch, pytest, pytest_timeout, hypothesis, expecttest, numpy, ninja, tqdm, matplotlib; assert torch.__version__.split('+')[0] == '$version'" 2>/dev/null; then
  echo "torch $version: making its virtual environment ($venv)"
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  "$py" -m pip install --quiet "torch==$version" "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6" expecttest numpy ninja \
    tqdm matplotlib "setuptools>=64" wheel 2>&1 | grep -v -e '^WARNING: Location' -e 'Running pip as' || true
  "$py" -c "import torch; print('torch', torch.__version__, 'installed')"
fi

# A fresh copy of what git tracks (and untracked files it does not ignore):
# tar keeps the files' times, so the build below recompiles only what changed.
rm -rf "$work/src"
mkdir -p "$work/src" "$work/temp"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$work/src"
echo "torch $version: building pycomm in $work/src (log: $work/build.log)"
if ! (cd "$work/src" && MAX_JOBS=${MAX_JOBS:-2} "$py" setup.py build_ext --inplace --build-temp "$work/temp" \
      >"$work/build.log" 2>&1); then
  grep -E -B2 -A8 "error|Error" "$work/build.log" | tail -60
  echo "torch $version: the build failed; the whole log is in $work/build.log" >&2
  exit 1
fi
sed -n 's/^pycomm-build: /torch '"$version"': /p' "$work/build.log" | head -n 1
cd "$work/src"
# The environment's own python first on PATH, so that anything a test starts by
# name runs on this torch too; and this copy on PYTHONPATH, as the editable
# install puts the checkout for the main set-up, so that scripts started from
# other folders (torchrun's) import this build of pycomm.
export PATH="$venv/bin:$PATH" PYTHONPATH="$work/src${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c "import torch, pycomm; print(f'torch {torch.__version__}: pytest on pycomm from {pycomm.__file__}')"
exec "$py" -m pytest -q -p no:cacheprovider "$@"
