#!/usr/bin/env bash
# Compiles every glue source (csrc/torch/*.cpp) against the headers of another
# torch release, with -fsyntax-only and the flags of the real build (read from
# the build.ninja of scripts/setup.sh's in-place build; CUDA on when that build
# had it): the glue builds on that release without installing it. The kernels
# (csrc/core, csrc/cuda) include no torch header, so they need no such check.
# Only the release's headers are kept (about 60 MB), cached in
# ~/.cache/pycomm/torch-headers/VERSION; the wheel (about 530 MB) is not.
#   Usage: scripts/check_torch_headers.sh VERSION [VERSION...]    e.g. 2.11.0
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ $# -gt 0 ] || { echo "usage: $0 VERSION [VERSION...]" >&2; exit 2; }

ninja_file=$(ls build/temp.*/pycomm._C/build.ninja 2>/dev/null | head -n 1)
[ -n "$ninja_file" ] || { echo "check_torch_headers: no build/temp.*/pycomm._C/build.ninja; run scripts/setup.sh first" >&2; exit 1; }
cflags=$(sed -n 's/^cflags = //p' "$ninja_file" | sed 's/ -c$//')
post_cflags=$(sed -n 's/^post_cflags = //p' "$ninja_file")
# The real build's torch include directories, which the other release's replace.
torch_include=$("$PY" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'include'))")
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pycomm/torch-headers

for version in "$@"; do
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
  echo "== the glue against torch $version's headers (-fsyntax-only, the build's flags)"
  # One compiler per source, MAX_JOBS at a time; every failure is printed.
  logs=$(mktemp -d)
  status=0
  ls csrc/torch/*.cpp | xargs -P "${MAX_JOBS:-2}" -I{} sh -c \
    'log="$2/$(basename "$1").log"; if c++ -fsyntax-only '"$flags"' "$1" 2>"$log"; then echo "ok   $1";
     else echo "FAIL $1"; cat "$log"; exit 1; fi' _ {} "$logs" || status=1
  rm -rf "$logs"
  [ $status = 0 ] || { echo "check_torch_headers: the glue does not compile against torch $version" >&2; exit 1; }
done
