#!/usr/bin/env bash
# pycomm's Python package on aarch64 under emulation, on demand (not in CI: it
# downloads about 0.5 GB and keeps 1.6 GB in its cache):
#   1. an Arm CPython 3.11 from Debian's arm64 packages (downloaded and
#      unpacked, not installed) and PyPI's aarch64 torch, run by qemu-user;
#   2. pycomm's extension (CPU sources) cross-compiled for it against that
#      torch, as setup.py would build it there with PYCOMM_MARCH=portable (the
#      sources and flags of csrc/sources_and_flags.txt);
#   3. two ranks of the backend against gloo (scripts/aarch64_smoke.py), and,
#      given arguments, pytest with them (its ranks are spawned processes,
#      which binfmt_misc hands to qemu; the script registers aarch64 there).
#   scripts/aarch64_python.sh                            # about 1 min once set up
#   scripts/aarch64_python.sh tests/test_allreduce.py    # and pytest (about 6 min more)
# Two stand-ins make the wheel load on this host. It is the CUDA build, and
# PyPI has no aarch64 CUDA libraries here: scripts/aarch64_cuda_stubs.py makes
# libraries of the same names that fail every call, so torch sees no GPU. And
# torch's CPU probe reads /proc/cpuinfo, which here describes the x86 host:
# qemu's -L root gives it an Arm one (a Neoverse N1's) instead.
# Emulation measures no speed and does not reorder memory as Arm cores do.
# Needs root (apt, binfmt_misc), scripts/cross_aarch64.sh's toolchain and qemu.
set -euo pipefail
cd "$(dirname "$0")/.."
ARM=${PYCOMM_AARCH64_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/pycomm/aarch64-python}
TORCH_VERSION=${TORCH_VERSION:-2.14.1}
root=$ARM/root site=$ARM/site
mkdir -p "$ARM"

if [ ! -f "$ARM/root.done" ]; then
  echo "aarch64_python: Debian's arm64 python3.11 and what it links, into $root"
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  apt-get update -qq >/dev/null
  packages=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances python3.11:arm64 libpython3.11-dev:arm64 libstdc++6:arm64 libgomp1:arm64 |
    grep -E '^[a-z0-9].*:arm64$' | sort -u)
  rm -rf "$root" "$ARM/debs" && mkdir -p "$root" "$ARM/debs"
  (cd "$ARM/debs" && apt-get download $packages >/dev/null)
  for deb in "$ARM"/debs/*.deb; do dpkg -x "$deb" "$root"; done
  rm -rf "$ARM/debs"
  touch "$ARM/root.done"
fi
if [ ! -f "$root/proc/cpuinfo" ]; then
  mkdir -p "$root/proc"
  for cpu in 0 1; do
    printf 'processor\t: %d\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n' $cpu
    mkdir -p "$root/sys/devices/system/cpu/cpu$cpu/regs/identification"
    echo 0x00000000413fd0c1 >"$root/sys/devices/system/cpu/cpu$cpu/regs/identification/midr_el1"
  done >"$root/proc/cpuinfo"
fi
# Each step leaves its mark when it is whole: an interrupted one runs again.
if [ "$(cat "$ARM/site.done" 2>/dev/null)" != "$TORCH_VERSION" ]; then
  echo "aarch64_python: torch $TORCH_VERSION for aarch64 and the test dependencies, into $site"
  rm -rf "$site" "$ARM/wheels" "$ARM/cuda-stubs" "$ARM/site.done"
  arm_wheels=(--platform manylinux_2_28_aarch64 --python-version 3.11 --implementation cp --only-binary=:all:)
  python3 -m pip download --quiet --no-deps "${arm_wheels[@]}" -d "$ARM/wheels" "torch==$TORCH_VERSION" \
    typing_extensions sympy mpmath networkx jinja2 markupsafe fsspec filelock setuptools numpy \
    pytest pytest-timeout pluggy iniconfig packaging pygments 2>&1 | grep -v -e '^WARNING' || true
  python3 -m pip install --quiet --no-deps --no-compile --no-index --target "$site" "${arm_wheels[@]}" \
    "$ARM"/wheels/*.whl 2>&1 | grep -v -e '^WARNING' || true
  rm -rf "$ARM/wheels"
  python3 scripts/aarch64_cuda_stubs.py "$site" "$root" "$ARM/cuda-stubs"
  echo "$TORCH_VERSION" >"$ARM/site.done"
fi
# The checkout's files (as .ci/run copies them), with the Arm builds of the
# extensions in its pycomm/: the Arm python runs there.
checkout=$ARM/checkout
python_arm() {
  (cd "$checkout" && PYTHONPATH="$checkout:$site" LD_LIBRARY_PATH="$ARM/cuda-stubs" QEMU_LD_PREFIX="$root" \
    qemu-aarch64-static -L "$root" "$root/usr/bin/python3.11" "$@")
}

echo "== pycomm's extension cross-compiled for aarch64 (against torch $TORCH_VERSION's aarch64 build)"
objects=$ARM/objects
mkdir -p "$objects"
# The words after KEY... on each line of csrc/sources_and_flags.txt that begins with them.
build_list() {
  awk -v key="$*" '{ sub(/#.*/, ""); $1 = $1 } index($0, key " ") == 1 { print substr($0, length(key) + 2) }' \
    csrc/sources_and_flags.txt
}
flags="$(build_list cxxflags) $(build_list march portable aarch64) -fPIC -DNDEBUG -fwrapv
  -D_GLIBCXX_USE_CXX11_ABI=1 -DTORCH_EXTENSION_NAME=_C -DTORCH_API_INCLUDE_EXTENSION_H
  -isystem $site/torch/include -isystem $site/torch/include/torch/csrc/api/include
  -isystem $root/usr/include/python3.11 -idirafter $root/usr/include"
sources=$(for pattern in $(build_list core) $(build_list glue); do ls $pattern; done)
echo "$sources" | xargs -P "${MAX_JOBS:-2}" -I{} sh -c \
  'o="$2/$(echo "$1" | tr / _).o"; [ "$o" -nt "$1" ] || aarch64-linux-gnu-g++ '"$(echo $flags)"' -c "$1" -o "$o"' \
  _ {} "$objects"
rm -rf "$checkout" && mkdir -p "$checkout"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$checkout"
aarch64-linux-gnu-g++ -shared $(echo "$sources" | sed "s|/|_|g; s|^|$objects/|; s|$|.o|") \
  -o "$checkout/pycomm/_C.cpython-311-aarch64-linux-gnu.so" \
  -L"$site/torch/lib" -lc10 -ltorch -ltorch_cpu -ltorch_python -Wl,--allow-shlib-undefined

echo "== two ranks of pycomm's backend on aarch64 (emulated), against gloo"
port=$((29500 + RANDOM % 2000))
pids=()
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    python_arm scripts/aarch64_smoke.py &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

if [ $# -gt 0 ]; then
  # Spawned ranks exec the Arm python: binfmt_misc hands aarch64 ELF files to qemu.
  binfmt=/proc/sys/fs/binfmt_misc
  [ -f $binfmt/register ] || mount -t binfmt_misc binfmt_misc $binfmt
  if [ ! -f $binfmt/qemu-aarch64 ]; then
    echo ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' \
      >$binfmt/register
  fi
  echo "== pytest on aarch64 (emulated): $*"
  python_arm -m pytest -q -p no:cacheprovider "$@"
fi
