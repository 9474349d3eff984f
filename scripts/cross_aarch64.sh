#!/usr/bin/env bash
# aarch64 (Graviton, Grace, Ampere) without an Arm machine, in three steps:
#   1. the torch-free core and its native tests cross-built with Debian's
#      g++-aarch64-linux-gnu for -march=armv8-a (the NEON paths of
#      float_lanes.h) and run by ctest under qemu-user;
#   2. the kernels' bit-for-bit test built again for SVE (-march=armv8.2-a+sve:
#      the compiler vectorises the reduction loops with SVE, as -mcpu=native
#      does on Graviton 3/4 and Grace) and run at vector lengths 128 and 512;
#   3. every glue source compiled for aarch64 against torch's headers
#      (scripts/check_torch_headers.sh --arch aarch64; needs scripts/setup.sh's
#      build first).
# Emulation runs the code, it does not reorder memory as Arm cores do: the
# ThreadSanitizer build (scripts/native_tests.sh thread) checks the ordering.
# Installs the cross compiler and qemu with apt when they are missing (about
# 10 s where Debian's packages are reachable). Usage: scripts/cross_aarch64.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v aarch64-linux-gnu-g++ >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then
  echo "cross_aarch64: installing g++-aarch64-linux-gnu and qemu-user-static"
  sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >/dev/null
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends g++-aarch64-linux-gnu qemu-user-static >/dev/null
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
qemu=(qemu-aarch64-static -L /usr/aarch64-linux-gnu)

echo "== native tests: aarch64 (cross-built, run under qemu)"
cmake -S . -B native-build-aarch64 "${generator[@]}" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DPYCOMM_MARCH=portable -DPYCOMM_CUDA=OFF -DPYCOMM_SANITIZE= -DCMAKE_CXX_FLAGS= >/dev/null
cmake --build native-build-aarch64 -j "${MAX_JOBS:-2}"
ctest --test-dir native-build-aarch64 --output-on-failure

echo "== the kernels' test: aarch64 with SVE, under qemu at 128- and 512-bit vectors"
cmake -S . -B native-build-aarch64-sve "${generator[@]}" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DPYCOMM_MARCH=armv8.2-a+sve -DPYCOMM_CUDA=OFF -DPYCOMM_SANITIZE= -DCMAKE_CXX_FLAGS= >/dev/null
cmake --build native-build-aarch64-sve -j "${MAX_JOBS:-2}" --target test_vector_kernels
for bytes in 16 64; do
  echo "-- SVE vector length $((bytes * 8)) bits"
  "${qemu[@]}" -cpu "max,sve-default-vector-length=$bytes" native-build-aarch64-sve/test_vector_kernels
done

scripts/check_torch_headers.sh --arch aarch64
