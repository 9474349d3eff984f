#!/usr/bin/env bash
# An NCCL that a lent GPU machine can be handed in one call (issue 48): NCCL 2.30 or newer,
# the first that runs several ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE=1), built for one
# architecture (sm_90: H100 and H200) with only the device functions the comparison calls, so
# that the library fits beside pycomm's tree in what a call carries (64 MiB). The GPU machine's
# torch 2.11 carries NCCL 2.28.9, which refuses two ranks on one GPU; the package index's NCCL
# 2.30 wheel is 206 MB. bench/harness/peers/nccl.py loads this library ahead of torch's own.
#
#   bench/gpu/build_nccl.sh --src DIR       a checkout of NVIDIA/nccl at v2.30.x or later
#   bench/gpu/build_nccl.sh --src TAR.GZ    the source an earlier build packed (below)
#   bench/gpu/build_nccl.sh                 clones tag $NCCL_TAG (v2.30.7-1) from GitHub first
#   bench/gpu/build_nccl.sh --dry-run ...   checks the source and the toolkit, builds nothing
#
# Output in bench/out/nccl (ignored by git; a GPU call names the folder in its carry):
# libnccl.so.2, and nccl-src.tar.gz, the source it was built from (about 1 MiB): should the
# library not load on the GPU machine (a binary built here may need newer system libraries
# than that image has; the preflight says), `bench/gpu_check.sh --steps nccl_build,...`
# builds it there from that. The build's record goes to bench/results/nccl/build.json
# (version, functions, architecture, size, build time), which bench/gpu/carry.py counts
# where the library is not built. Objects stay in build/nccl, so a second run with the same
# functions relinks only.
set -euo pipefail
cd "$(dirname "$0")/../.."

NCCL_TAG=${NCCL_TAG:-v2.30.7-1}
ARCH=${NCCL_ARCH:-90}
# What the comparison calls, as NCCL's device generator takes it (src/device/generate.py: one
# regex over "AllReduce <op> <type> <algo> <proto>", "AllGather <algo> <proto>", ...):
# the all-reduce sums the benches time (fp32, bf16, fp16), the fp64 and int64 sums a
# harness reduces its records with (bench/harness/world.py: fp64 sums and maxima, on the GPU
# where the group is NCCL's), and what ProcessGroupNCCL and DDP call at set-up (barrier: an
# fp32 sum; parameter shapes and all_gather_object: all-gather; module states: broadcast)
# and for point-to-point. A function left out is refused by NCCL with an error, never run
# wrong.
FUNCS=${NCCL_FUNCS:-"AllReduce Sum (f32|bf16|f16|f64|i64) (RING|TREE) *|AllReduce MinMax (f32|f64|i64) (RING|TREE) *|AllGather RING *|Broadcast RING *|SendRecv"}
# The most the library may weigh: pycomm's tree travels with it (bench/gpu_check.sh
# --dry-run checks the sum against the carry limit).
MAX_MIB=${NCCL_MAX_MIB:-40}

src= dry=
while [ $# -gt 0 ]; do
  case $1 in
    --src) src=${2:?--src needs a directory or a .tar.gz}; shift ;;
    --dry-run) dry=1 ;;
    *) echo "usage: bench/gpu/build_nccl.sh [--dry-run] [--src NCCL_CHECKOUT|NCCL_SRC.tar.gz]" >&2
       exit 2 ;;
  esac
  shift
done

work=$PWD/build/nccl
out=$PWD/bench/out/nccl
cuda_home=${CUDA_HOME:-/usr/local/cuda}  # the real one: `nvcc` on PATH may be a wrapper
if [ -n "$dry" ]; then
  if [ -z "$src" ]; then echo "would clone NVIDIA/nccl $NCCL_TAG into $work/src"
  elif ! [ -e "$src" ]; then echo "no $src here (a GPU call carries it): nothing to check"; exit 0
  elif [ -d "$src" ] && ! [ -f "$src/makefiles/version.mk" ]; then echo "$src is no NCCL checkout"; exit 2
  fi
  [ -x "$cuda_home/bin/nvcc" ] || { echo "no nvcc in $cuda_home/bin (set CUDA_HOME)"; exit 2; }
  echo "would build ${src:-the clone} for sm_$ARCH with $cuda_home/bin/nvcc, functions: $FUNCS"
  exit 0
fi
mkdir -p "$work" "$out"
if [[ $src == *.tar.gz ]]; then
  [ -f "$src" ] || { echo "build_nccl.sh: no $src" >&2; exit 2; }
  rm -rf "$work/unpacked"
  mkdir -p "$work/unpacked"
  tar -xzf "$src" -C "$work/unpacked"
  src=$work/unpacked
elif [ -z "$src" ]; then
  src=$work/src
  if ! [ -f "$src/makefiles/version.mk" ]; then
    rm -rf "$src"
    git clone --quiet --depth 1 --branch "$NCCL_TAG" https://github.com/NVIDIA/nccl "$src" || {
      echo "build_nccl.sh: could not clone NVIDIA/nccl $NCCL_TAG; pass --src with a checkout" >&2
      exit 1
    }
  fi
fi
[ -f "$src/makefiles/version.mk" ] || { echo "build_nccl.sh: $src is no NCCL checkout (no makefiles/version.mk)" >&2; exit 2; }
field() { awk -v k="$1" '$1 == k { print $3 }' "$src/makefiles/version.mk"; }
version="$(field NCCL_MAJOR).$(field NCCL_MINOR).$(field NCCL_PATCH)"
if [ "$(field NCCL_MAJOR)" -lt 2 ] || { [ "$(field NCCL_MAJOR)" = 2 ] && [ "$(field NCCL_MINOR)" -lt 30 ]; }; then
  echo "build_nccl.sh: $src is NCCL $version; ranks sharing a GPU need 2.30 or newer" >&2
  exit 2
fi

[ -x "$cuda_home/bin/nvcc" ] || { echo "build_nccl.sh: no nvcc in $cuda_home/bin (set CUDA_HOME)" >&2; exit 2; }
# The functions are part of the device objects' identity (NCCL's make regenerates their
# sources only when its generator changes): other functions rebuild the device code.
stamp="$version sm_$ARCH $FUNCS"
from_scratch=false  # whether this run compiles every object (its time is then the build's)
[ -d "$work/obj" ] || from_scratch=true
if [ "$(cat "$work/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$work/obj/device" "$work/lib"
  echo "$stamp" >"$work/stamp"
fi

echo "build_nccl.sh: NCCL $version for sm_$ARCH, functions: $FUNCS (log: $work/build.log)"
start=$SECONDS
if ! make -C "$src" -j "${MAX_JOBS:-$(nproc)}" src.build BUILDDIR="$work" CUDA_HOME="$cuda_home" \
     NVCC_GENCODE="-gencode=arch=compute_$ARCH,code=sm_$ARCH" ONLY_FUNCS="$FUNCS" \
     >"$work/build.log" 2>&1; then
  grep -E -B2 -A6 "error|Error" "$work/build.log" | tail -40
  echo "build_nccl.sh: the build failed; the whole log is in $work/build.log" >&2
  exit 1
fi
seconds=$((SECONDS - start))

lib=$(ls "$work"/lib/libnccl.so.*.*.* | head -1)
# Host symbols' debug sections out (NCCL builds with -g); the device code (.nv_fatbin) stays.
strip --strip-debug -o "$out/libnccl.so.2" "$lib"
# What a build needs of the source, for a build on the GPU machine should the library not
# load there (its license with it).
tar -czf "$out/nccl-src.tar.gz.tmp" -C "$src" Makefile makefiles src LICENSE.txt &&
  mv "$out/nccl-src.tar.gz.tmp" "$out/nccl-src.tar.gz"
bytes=$(stat -c %s "$out/libnccl.so.2")
carried=$(du -sb "$out" | cut -f1)  # what a call that names the folder carries
mkdir -p bench/results/nccl
python3 - bench/results/nccl/build.json "$version" "$ARCH" "$FUNCS" "$bytes" "$carried" \
  "$seconds" "$(nproc)" "$from_scratch" <<'EOF'
import datetime, json, sys
path, version, arch, funcs, size, carried, seconds, cores, scratch = sys.argv[1:]
json.dump(dict(version=version, arch=f"sm_{arch}", functions=funcs, bytes=int(size),
               carried_bytes=int(carried), build_seconds=int(seconds),
               from_scratch=scratch == "true", cores=int(cores),
               date=datetime.date.today().isoformat()), open(path, "w"), indent=1)
EOF
mib=$(( (bytes + 1048575) / 1048576 ))
echo "build_nccl.sh: $out/libnccl.so.2: NCCL $version, $mib MiB, $seconds s on $(nproc) cores" \
  "($($from_scratch && echo "every object built" || echo "objects of an earlier build reused"))"
if [ "$mib" -gt "$MAX_MIB" ]; then
  echo "build_nccl.sh: over the $MAX_MIB MiB it may weigh beside pycomm's tree; name fewer functions (NCCL_FUNCS)" >&2
  exit 1
fi
