"""What a call to the lent GPU machine carries, against what one call may carry (64 MiB: the
working tree, its tracked and untracked-not-ignored files, and the ignored paths a call
names, here the NCCL of bench/gpu/build_nccl.sh). bench/gpu_check.sh checks it first, so
that its dry run in CI fails when the tree grows past what a call takes.

    python3 -m bench.gpu.carry     # from the checkout's root; exit 1 when over

The NCCL counted is the folder bench/out/nccl (the library and its source) where it was
built, else the size its build recorded in bench/results/nccl/build.json (CI builds
none). Standard library only.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from ..harness.peers.nccl import CARRIED as CARRIED_NCCL  # imports no torch

LIMIT_MIB = 64
RECORDED_NCCL = "bench/results/nccl/build.json"
# Where a tree without git keeps what does not travel (.gitignore's build outputs).
NOT_CARRIED = (".git", "build", "dist", "bench/out")


def _size(path):
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0  # listed by git, deleted since


def tree_bytes(root="."):
    """(bytes, how counted) of the files that travel with every call."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=root, capture_output=True, check=True, timeout=30).stdout
        names = {n for n in out.decode().split("\0") if n}
        return sum(_size(os.path.join(root, n)) for n in names), "git's tracked and unignored files"
    except (OSError, subprocess.SubprocessError):
        total = 0
        for top, dirs, files in os.walk(root):
            rel = os.path.relpath(top, root)
            dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel, d)) not in NOT_CARRIED
                       and not d.startswith("native-build")]
            total += sum(_size(os.path.join(top, f)) for f in files if not f.endswith(".so"))
        return total, "every file but build outputs (no git here)"


def nccl_bytes(root="."):
    """(bytes, where from) of the NCCL a GPU call carries: the folder of its library."""
    folder = os.path.dirname(os.path.join(root, CARRIED_NCCL))
    if os.path.exists(os.path.join(root, CARRIED_NCCL)):
        return sum(_size(os.path.join(folder, f)) for f in os.listdir(folder)), \
            os.path.dirname(CARRIED_NCCL)
    try:
        with open(os.path.join(root, RECORDED_NCCL)) as f:
            record = json.load(f)
        return int(record["carried_bytes"]), f"{RECORDED_NCCL} (NCCL {record['version']}, " \
                                             f"built {record['date']}; not built here)"
    except (OSError, ValueError, KeyError, TypeError):
        return 0, "no NCCL built or recorded (bench/gpu/build_nccl.sh)"


def main() -> int:
    tree, how = tree_bytes()
    nccl, where = nccl_bytes()
    mib = lambda n: n / (1 << 20)  # noqa: E731
    total = tree + nccl
    print(f"carried: the tree {mib(tree):.1f} MiB ({how}) + NCCL {mib(nccl):.1f} MiB ({where}) "
          f"= {mib(total):.1f} MiB of the {LIMIT_MIB} MiB a call takes")
    if total > LIMIT_MIB << 20:
        print("carried: OVER: a call would be refused; ignore or carry less", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
