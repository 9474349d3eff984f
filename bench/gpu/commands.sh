# Sourced by bench/gpu_check.sh, whose variables and plan functions are set by then: the
# steps' commands that are functions: the machine's facts, the native build, the
# thread-scaling sizes.

# machine_facts JSON: what needs neither torch nor the GPU, written first, then
# whether the driver answers: `nvidia-smi -L` within 20 s (a fresh machine's first call
# starts the driver), its GPU lines deciding which steps run, then the GPU's fields. It
# fails (after all that) where the tree and the NCCL it carries are more than a call takes:
# in CI's dry run, before a call is refused for it.
machine_facts() {
  local json=${1:?machine_facts JSON} start rc carried=0
  [ $# = 1 ] || { echo "machine_facts: unknown arguments: ${*:2}"; return 2; }
  python3 -m bench.gpu.carry || carried=$?
  python3 -m bench.gpu.facts host --json "$json" || return
  echo "\$ timeout 20 nvidia-smi -L"
  start=$SECONDS
  timeout 20 nvidia-smi -L
  rc=$?
  echo "nvidia-smi -L: rc $rc after $((SECONDS - start)) s"  # gpu_check.sh reads this line
  # The fields' query fits in this step's limit only after a prompt answer.
  [ "$rc" = 0 ] && [ $((SECONDS - start)) -lt 15 ] && python3 -m bench.gpu.facts smi --json "$json"
  return "$carried"
}

# The native build: CMake (ctest's tests and the threads bench) where cmake exists, else the
# threads bench alone, compiled by nvcc.
native_build() {
  local gen=() nvcc
  command -v ninja >/dev/null && gen=(-G Ninja)
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  local configure=(cmake -S . -B "$native" "${gen[@]}" -DCMAKE_CUDA_ARCHITECTURES=90
                   "-DCMAKE_CUDA_COMPILER=$nvcc")
  local build=(cmake --build "$native" -j "$jobs")
  if [ "${1:-}" = --dry-run ]; then
    shift
    [ $# = 0 ] || { echo "native_build: unknown arguments: $*"; return 2; }
    echo "would run: ${configure[*]} && ${build[*]}"
    command -v cmake >/dev/null || echo "(no cmake here: nvcc would build the threads bench alone)"
    return 0
  fi
  [ $# = 0 ] || { echo "native_build: unknown arguments: $*"; return 2; }
  if command -v cmake >/dev/null; then
    "${configure[@]}" && "${build[@]}"
  else
    echo "no cmake: the threads bench alone, compiled by nvcc (no native tests)"
    mkdir -p "$native" &&
      "$nvcc" -std=c++20 -O3 -arch=sm_90 -Icsrc/core -o "$native/threads_all_reduce_bench" \
        csrc/cuda/bench/threads_all_reduce_bench.cu csrc/cuda/*.cu \
        csrc/core/transport/*.cpp csrc/core/collectives/*.cpp csrc/core/kernels/*.cpp -lpthread
  fi
}

# thread_scaling_sizes: the native thread_scaling bench on up to every core, at 64 MiB and
# 16 MiB buffers (the size issue 35's target names).
thread_scaling_sizes() {
  local run=("$native/thread_scaling" "$jobs")
  if [ "${1:-}" = --dry-run ]; then
    shift
    [ $# = 0 ] || { echo "thread_scaling_sizes: unknown arguments: $*"; return 2; }
    [ -f csrc/core/bench/thread_scaling.cpp ] || { echo "no csrc/core/bench/thread_scaling.cpp"; return 9; }
    echo "would run: ${run[*]} 64 && ${run[*]} 16"
    return 0
  fi
  [ $# = 0 ] || { echo "thread_scaling_sizes: unknown arguments: $*"; return 2; }
  "${run[@]}" 64 && "${run[@]}" 16
}
