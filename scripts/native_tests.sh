#!/usr/bin/env bash
# Builds and runs the native (torch-free) tests three times: plain (with the
# CUDA kernels compiled when a toolkit is found), under ThreadSanitizer, and
# under AddressSanitizer. Usage: scripts/native_tests.sh [plain|thread|address]...
set -euo pipefail
cd "$(dirname "$0")/.."
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(plain thread address)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
for v in "${variants[@]}"; do
  dir="native-build-$v"
  sanitize=""
  [ "$v" = plain ] || sanitize="$v"
  # Stated every time: a cached choice from an earlier run must not stick.
  cuda_flags=(-DPYCOMM_CUDA=OFF)
  if [ "$v" = plain ] && [ -x /usr/local/cuda/bin/nvcc ] && [ "${PYCOMM_CUDA:-1}" != 0 ]; then
    cuda_flags=(-DPYCOMM_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
  fi
  echo "== native tests: $v"
  cmake -S . -B "$dir" "${generator[@]}" -DPYCOMM_SANITIZE="$sanitize" "${cuda_flags[@]}" >/dev/null
  cmake --build "$dir" -j "${MAX_JOBS:-2}"
  # halt_on_error: a sanitizer report fails the run, not just prints.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ASAN_OPTIONS="halt_on_error=1" \
    ctest --test-dir "$dir" --output-on-failure
done
