#!/usr/bin/env bash
# Compiles every glue source (csrc/torch/*.cpp) with -fsyntax-only and the flags of the real build (read from the
# build.ninja of scripts/setup.sh's in-place build; CUDA on when that build had
# it), against the headers of another torch release, for another architecture,
# or both:
#   - a release: the glue builds on it without installing it. Only its headers
#     are kept (about 60 MB), cached in ~/.cache/pycomm/torch-headers/VERSION;
#     the wheel (about 530 MB) is not. With no VERSION: the installed torch.
#   - --arch aarch64: Debian's cross compiler (aarch64-linux-gnu-g++, which
#     scripts/cross_aarch64.sh installs) with -march=armv8-a for the build's
#     -march: an x86-only construct in the glue (an intrinsic, a header, an
#     inline asm) fails. torch's headers are the same for both architectures.
# The kernels (csrc/core, csrc/cuda) include no torch header; the native tests
# build them for each architecture.
#   Usage: scripts/check_torch_headers.sh [--arch aarch64] [VERSION...]    e.g. 2.11.0
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CXX_FOR_ARCH=c++
arch=native
if [ "${1:-}" = --arch ]; then
  arch=${2:?"--arch needs a value: aarch64"}
  shift 2
  [ "$arch" = aarch64 ] || { echo "check_torch_headers: --arch: only aarch64 is known, not '$arch'" >&2; exit 2; }
  CXX_FOR_ARCH=aarch64-linux-gnu-g++
  command -v "$CXX_FOR_ARCH" >/dev/null ||
    { echo "check_torch_headers: no $CXX_FOR_ARCH; scripts/cross_aarch64.sh installs it" >&2; exit 1; }
fi

ninja_file=$(ls build/temp.*/build.ninja 2>/dev/null | head -n 1)
[ -n "$ninja_file" ] || { echo "check_torch_headers: no build/temp.*/build.ninja; run scripts/setup.sh first" >&2; exit 1; }
cflags=$(sed -n 's/^cflags = //p' "$ninja_file" | sed 's/ -c$//')
post_cflags=$(sed -n 's/^post_cflags = //p' "$ninja_file")
if [ "$arch" = aarch64 ]; then
  post_cflags=$(echo "$post_cflags" | sed -E 's/-m(arch|cpu|tune)=[^ ]*//g')" -march=armv8-a"
fi
# The real build's torch include directories, which another release's replace.
torch_include=$("$PY" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'include'))")
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pycomm/torch-headers

# Compiles each source with the given flags, MAX_JOBS at a time; prints every
# failure and returns non-zero if any.
compile_all() {
  local flags=$1
  shift
  local logs status=0
  logs=$(mktemp -d)
  printf '%s\n' "$@" | xargs -P "${MAX_JOBS:-2}" -I{} sh -c \
    'log="$2/$(basename "$1").log"; if '"$CXX_FOR_ARCH"' -fsyntax-only '"$flags"' "$1" 2>"$log"; then echo "ok   $1";
     else echo "FAIL $1"; cat "$log"; exit 1; fi' _ {} "$logs" || status=1
  rm -rf "$logs"
  return $status
}

[ $# -gt 0 ] || set -- installed
for version in "$@"; do
  if [ "$version" = installed ]; then
    flags="$cflags $post_cflags"
    what="the installed torch's headers"
  else
    headers="$cache/$version"
    if [ ! -f "$headers/torch/include/torch/headeronly/version.h" ]; then
      echo "check_torch_headers: fetching the headers of torch $version"
      tmp=$(mktemp -d)
      "$PY" -m pip download --quiet --no-deps --only-binary=:all: "torch==$version" -d "$tmp" 2>&1 |
        grep -v -e '^WARNING: Location' -e 'Running pip as' || true
      wheel=$(ls "$tmp"/torch-*.whl 2>/dev/null | head -n 1)
      [ -n "$wheel" ] || { echo "check_torch_headers: pip found no wheel of torch $version" >&2; rm -rf "$tmp"; exit 1; }
      rm -rf "$headers.partial" && mkdir -p "$headers.partial"
      unzip -q "$wheel" 'torch/include/*' -d "$headers.partial"
      rm -rf "$tmp" "$headers" && mv "$headers.partial" "$headers"
    fi
    found=$(sed -n 's/^ *"\([0-9.]*\)".*/\1/p' "$headers/torch/include/torch/headeronly/version.h" | head -n 1)
    [ "$found" = "$version" ] || { echo "check_torch_headers: $headers holds torch '$found', not $version" >&2; exit 1; }
    flags="${cflags//$torch_include/$headers/torch/include} $post_cflags"
    what="torch $version's headers"
  fi
  echo "== the glue for $arch against $what (-fsyntax-only, the build's flags)"
  compile_all "$flags" csrc/torch/*.cpp ||
    { echo "check_torch_headers: the glue does not compile for $arch against $what" >&2; exit 1; }
done
