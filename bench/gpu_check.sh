#!/usr/bin/env bash
# The GPU check, in one short run on a machine with a CUDA GPU: build with the
# CUDA sources, run the GPU tests, and time the CUDA kernels. Ends with a table.
# Usage: bench/gpu_check.sh            (results also land in $OUT when set)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
MAX_JOBS=${MAX_JOBS:-8} scripts/setup.sh
python3 -m pytest -q -p no:cacheprovider tests/test_cuda_kernels.py tests/test_bucket_ops.py \
  2>&1 | tee "$out/gpu_tests.txt"
python3 - <<'PY' 2>&1 | tee "$out/gpu_kernels.txt"
import torch, pycomm
print(f"{'kernel':<24} {'MB':>8} {'us':>10} {'GB/s':>8}")
for mb in (1, 16, 256):
    n = mb * (1 << 20) // 4
    a = torch.randn(n, device="cuda"); b = torch.randn(n, device="cuda")
    for name, fn in (("pycomm sum_into_", lambda: torch.ops.pycomm.sum_into_(a, b)),
                     ("torch add_", lambda: a.add_(b)),
                     ("copy_ (ceiling ref)", lambda: a.copy_(b))):
        for _ in range(3): fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(20):
            start.record(); fn(); end.record(); torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        us = sorted(times)[len(times) // 2]
        moved = 3 if name != "copy_ (ceiling ref)" else 2
        print(f"{name:<24} {mb:>8} {us:>10.1f} {moved * n * 4 / us / 1e3:>8.1f}")
PY
