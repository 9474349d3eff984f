#!/usr/bin/env bash
# Runs pytest with /dev/shm a 1 MiB tmpfs, as in a container whose /dev/shm is
# tiny: pycomm's default transport (memfd) must need none of it. The mount is
# made in a private mount namespace (unshare -m), so the host's /dev/shm is
# untouched and the small one vanishes with the run. Needs root (or
# CAP_SYS_ADMIN) for unshare and mount.
#   scripts/small_shm_tests.sh [pytest arguments...]   (default: the whole suite)
set -euo pipefail
cd "$(dirname "$0")/.."
size=${PYCOMM_SMALL_SHM_SIZE:-1m}
if [ "${PYCOMM_IN_SMALL_SHM:-}" != 1 ]; then
  if ! unshare -m true 2>/dev/null; then
    echo "small_shm_tests: unshare -m is refused here (it needs root or CAP_SYS_ADMIN)" >&2
    exit 1
  fi
  PYCOMM_IN_SMALL_SHM=1 exec unshare -m "$0" "$@"
fi
# In the private namespace: a fresh, small tmpfs over /dev/shm (private
# propagation, so the host never sees it).
mount --make-rprivate /
mount -t tmpfs -o "size=$size,mode=1777" tmpfs /dev/shm
echo "== pytest with /dev/shm a $(df -h --output=size /dev/shm | tail -1 | tr -d ' ') tmpfs (private mount namespace)"
python3 -m pytest -q -p no:cacheprovider "$@"
