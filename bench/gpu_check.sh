#!/usr/bin/env bash
# The GPU check: one run on a machine with a CUDA GPU, about 6 minutes (each
# step has a time limit; about 11 at worst), that
# builds pycomm against the torch it finds, runs the CUDA tests, times the
# CUDA all-reduce, compares it with NCCL and PyTorch's symmetric memory, runs
# the ResNet-50 DDP bench on CUDA and the CPU collectives sweep with 4 and 8
# ranks, and ends with one table. Everything lands in $OUT (bench/out/gpu when
# unset). A step that fails is recorded and the next one runs.
#   Usage: bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out/gpu}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
jobs=$(nproc)
summary="$out/summary.tsv"
: >"$summary"

# step NAME SECONDS COMMAND...: runs it with a time limit, logs to $out/NAME.txt.
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  echo "== $name"
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  printf '%s\t%s\t%ss\n' "$name" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")" \
    "$((SECONDS - start))" | tee -a "$summary"
  tail -n 3 "$out/$name.txt"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"nccl", ".".join(map(str, torch.cuda.nccl.version())))' >>"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

# Hopper only: the machine's GPU is an H100/H200 (sm_90).
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
step build 200 env MAX_JOBS="$jobs" python3 setup.py build_ext --inplace
step native 90 bash -c "cmake -S . -B native-build-gpu -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_CUDA_COMPILER=\$(command -v nvcc || echo /usr/local/cuda/bin/nvcc) >/dev/null &&
  cmake --build native-build-gpu -j $jobs && ctest --test-dir native-build-gpu --output-on-failure"

# Ranks as threads of one process, one stream each: the kernels' own speed.
for n in 2 4 8; do
  step "threads_$n" 30 native-build-gpu/threads_all_reduce_bench --ranks "$n" --min-bytes 8 \
    --max-bytes 256M --iters 30 --json "$out/threads_$n.json"
done
step sanitizer 30 compute-sanitizer --tool memcheck --error-exitcode 1 \
  native-build-gpu/threads_all_reduce_bench --ranks 2 --min-bytes 8 --max-bytes 1M --iters 2
step cuda_tests 150 python3 -m pytest -q -p no:cacheprovider -x tests/test_cuda_path.py \
  tests/test_cuda_kernels.py tests/test_bucket_ops.py

# Ranks as processes over CUDA IPC, all on this GPU: values for 2, 3 and 4;
# times under MPS when it starts as a user daemon (the GPU's settings stay as they are).
export CUDA_MPS_PIPE_DIRECTORY=/tmp/pycomm-mps CUDA_MPS_LOG_DIRECTORY=/tmp/pycomm-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
mps=no
if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d 2>/dev/null; then
  mps=yes
fi
echo "MPS: $mps" | tee -a "$out/gpu.txt"
for n in 2 3 4; do
  step "procs_$n" 45 python3 bench/cuda_allreduce_perf.py --nproc "$n" -b 8 -e 256M -f 32 \
    --iters 10 --json "$out/procs_$n.json"
done
step ddp_resnet50 100 python3 bench/ddp_resnet50.py --device cuda --nproc 2 \
  --modes stock,ring,ring-bf16 --steps 6 --warmup 2 --no-baseline --json "$out/ddp_resnet50.json" --plot ''
[ "$mps" = yes ] && echo quit | nvidia-cuda-mps-control

# The CPU shared-memory path on more cores than CI has.
for n in 4 8; do
  step "cpu_collectives_$n" 45 python3 bench/collectives_perf.py --nproc "$n" -b 64K -e 16M -f 256 \
    --rounds 1 --min-time 0.1 --no-mpi --json "$out/cpu_collectives_$n.json"
done

python3 bench/gpu_summary.py "$out" | tee "$out/table.txt"
