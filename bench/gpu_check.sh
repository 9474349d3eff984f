#!/usr/bin/env bash
# The GPU check: one run of about 5 to 7 minutes on a machine with one CUDA GPU (the H200
# pycomm borrows for ~15 minutes, start-up included) that returns, cheapest and most certain
# first: the machine's facts; the build and pycomm's CUDA status; the native protocol tests;
# the kernels' values and times with ranks as threads of one process; compute-sanitizer's
# verdict; every algorithm's values between processes over CUDA IPC; timings of processes
# under MPS beside NCCL and PyTorch's symmetric memory; DDP ResNet-50 with the ring hook; the
# CPU sweep on 16 cores; one table.
#
#   bench/gpu_check.sh             on the GPU machine
#   bench/gpu_check.sh --dry-run   anywhere (CI): the same steps, each checked as far as it
#                                  can be without a GPU and recorded "skipped: no GPU"
#   bench/gpu_check.sh --steps ipc_tests,ddp_grads   a rerun of a few steps (and preflight)
#                                  on the same machine, on the build the first run left;
#                                  the others are recorded "skipped: not selected"
#
# Every step has a time limit (STEPS below: their sum, printed first, is the run's worst
# case and stays under 9 minutes); its output goes to $OUT/log.txt as it runs and its line to
# $OUT/steps.tsv when it ends; one that fails or runs out of time never stops the next. After
# each step bench/gpu_summary.py rebuilds $OUT/results.json (the numbers) and $OUT/table.txt,
# so $OUT (bench/out/gpu when unset) holds these four files whenever the run ends.
#
# Why the steps are what they are (DESIGN.md, "What runs where"): kernels of different
# processes take turns on one GPU unless MPS runs, so processes without MPS check values
# only, and times come from ranks as threads of one process or from processes under MPS
# (a daemon of our own, in folders of our own, stopped on exit). The GPU's settings are
# never changed. NCCL before 2.30 refuses two ranks on one GPU: bench/harness/peers/nccl.py.
#
# A dry run checks each step's command as it would run: a Python driver's real arguments are
# parsed and its imports made by bench/dry_run.py (a wrong flag fails argparse), pytest
# collects the selected tests, setup.py is evaluated, a native binary's flags are looked up
# in its source. GPU_CHECK_BREAK=STEP hands STEP's command a flag nothing accepts:
# tests/test_gpu_check.py proves with it that a failing step does not stop the next.
set -uo pipefail
bash -n "$0" || exit 2  # a syntax error fails at once, dry run or not
cd "$(dirname "$0")/.."

dry= only=
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --steps) only=,${2:?--steps needs a comma list of step names},; shift ;;
    *) echo "usage: bench/gpu_check.sh [--dry-run] [--steps NAME,NAME...]" >&2; exit 2 ;;
  esac
  shift
done

# name, limit in seconds, in the order the steps are recorded. native_build runs beside build
# (and import), from build's start and within build's limit, so it adds nothing to the total.
STEPS="
preflight         15
build            140
import            15
native_build     140 beside
native_tests      15
threads_tiny      12
threads_2         12
threads_4         12
threads_8         18
memcheck          20
racecheck         15
ipc_tests         70
mps_start         15
mps_procs_2       18
mps_procs_3       18
mps_procs_4       20
ddp_grads         30
ddp_resnet50      45
cpu_collectives_4 15
cpu_collectives_8 20
summary            6
"
limit_of() {
  local limit
  limit=$(awk -v n="$1" '$1 == n { print $2 }' <<<"$STEPS")
  [ -n "$limit" ] || { echo "gpu_check.sh: no step named $1" >&2; exit 2; }
  echo "$limit"
}
total=$(awk 'NF >= 2 && $3 != "beside" { s += $2 } END { print s }' <<<"$STEPS")
for name in ${only//,/ }; do limit_of "$name" >/dev/null; done
# Seconds of each step's limit kept for its bookkeeping (the table after it).
BOOKKEEPING=4

out=${OUT:-bench/out/gpu}
mkdir -p "$out"
rm -f "$out/log.txt" "$out/steps.tsv" "$out/results.json" "$out/table.txt"
log=$out/log.txt steps_tsv=$out/steps.tsv
: >"$log"
: >"$steps_tsv"
work=$(mktemp -d "${TMPDIR:-/tmp}/pycomm-gpu-check.XXXXXX")
raw=$work/raw  # the steps' own outputs, gathered into results.json after each
mkdir -p "$raw"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export jobs=$(nproc) native=native-build-gpu
bench=$native/threads_all_reduce_bench
failures=0
mps_tried= native_pid=

cleanup() {
  stop_mps
  [ -n "$native_pid" ] && [ -f "$work/native_build.pid" ] &&
    kill -- "-$(cat "$work/native_build.pid")" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "# bench/gpu_check.sh${dry:+ --dry-run}${only:+ --steps ${only:1:-1}}: $(grep -c . <<<"$STEPS")" \
  "steps, at most $total s in all (the sum of their limits; each is cut at its own); output in $out" |
  tee -a "$log"
awk 'NF >= 2 { printf "#   %-18s %4d s%s\n", $1, $2, ($3 == "beside" ? " (beside build)" : "") }' \
  <<<"$STEPS" | tee -a "$log"

# ----------------------------------------------------------------------------- the steps

# record NAME STATUS SECONDS [NOTE]: NAME's line in steps.tsv, then the table again.
record() {
  local name=$1 status=$2 took=$3 note=${4:-}
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$took" "$(limit_of "$name")" "$note" >>"$steps_tsv"
  case $status in ok | skipped*) ;; *) failures=$((failures + 1)) ;; esac
  printf '   %-18s %s (%s s)%s\n' "$name" "$status" "$took" "${note:+: $note}"
  timeout 3 python3 bench/gpu_summary.py "$out" --raw "$raw" --limit "$total" >/dev/null 2>>"$log" ||
    echo "   (the table could not be rebuilt: see log.txt)"
}
recorded() { awk -F'\t' -v n="$1" '$1 == n { f = 1 } END { exit !f }' "$steps_tsv"; }

selected() { [ -z "$only" ] || [ "$1" = preflight ] || [[ $only == *",$1,"* ]]; }

status_of() {  # the status of step $2, whose command exited with $1
  case $1 in
    0) echo ok ;;
    124 | 137) echo "TIMEOUT at $(($(limit_of "$2") - BOOKKEEPING)) s" ;;
    *) echo "FAILED rc=$1" ;;
  esac
}

# step NAME DRY_WHY CMD...: runs CMD (a program or an exported function) within NAME's
# limit, its output appended to log.txt as it comes and kept as $raw/NAME.log, and records
# how it ended ($note, when set, goes with it). With DRY_WHY set, a dry run runs CMD's dry
# form instead, and a pass is "skipped: DRY_WHY".
note=
step() {
  local name=$1 why=$2 limit from start rc status
  shift 2
  if ! selected "$name"; then
    record "$name" "skipped: not selected" 0
    return
  fi
  limit=$(limit_of "$name") || exit 2  # a step the plan does not know: the script is wrong
  [ "${GPU_CHECK_BREAK:-}" = "$name" ] && set -- "$@" --gpu-check-broken-flag
  [ -n "$dry" ] && [ -n "$why" ] && set -- dry_form "$@"
  printf '\n==== %s (limit %s s): %s\n' "$name" "$limit" "$*" >>"$log"
  echo "== $name"
  from=$(stat -c %s "$log") start=$SECONDS
  timeout --kill-after=1 "$((limit - BOOKKEEPING))" bash -c '"$@"' _ "$@" >>"$log" 2>&1 </dev/null
  rc=$?
  tail -c +"$((from + 1))" "$log" >"$raw/$name.log"
  status=$(status_of "$rc" "$name")
  if [ -n "$dry" ] && [ -n "$why" ]; then
    if [ "$rc" = 0 ]; then record "$name" "skipped: $why" "$((SECONDS - start))" "dry form ok"
    else record "$name" "$status (dry run)" "$((SECONDS - start))"; fi
  else
    record "$name" "$status" "$((SECONDS - start))" "$note"
  fi
}

# any NAME CMD...: a step that runs the same in a dry run.
any() { step "$1" "" "${@:2}"; }
# host NAME CMD...: a step for the GPU machine's host (its build, its 16 cores).
host() { step "$1" "dry run" "${@:2}"; }
# gpu NAME CMD...: a step that needs the GPU. A real run on a machine without one records
# it as skipped rather than failing it.
gpu() {
  if [ -z "$dry" ] && [ -z "$gpu_visible" ] && selected "$1"; then
    record "$1" "skipped: no GPU visible" 0
    return
  fi
  step "$1" "no GPU (dry run)" "${@:2}"
}

# runnable NAME REASON TEST...: whether NAME should run: always in a dry run (every step's
# dry form runs) or when not selected (step records that), else when TEST succeeds; when
# not, NAME is recorded as skipped for REASON.
runnable() {
  local name=$1 reason=$2
  shift 2
  if [ -n "$dry" ] || ! selected "$name" || "$@"; then return 0; fi
  record "$name" "skipped: $reason" 0
  return 1
}

# Whether step NAME passed; one left out by --steps counts, on the word of an earlier run
# on this machine (a rerun of a few steps keeps the build it made).
step_status() { awk -F'\t' -v n="$1" '$1 == n { s = $2 } END { print s }' "$steps_tsv"; }
status_is_ok() { case $(step_status "$1") in ok | "skipped: not selected") return 0 ;; esac; return 1; }

# dry_form CMD...: checks CMD as far as a machine without a GPU can, without running it.
dry_form() {
  case $1 in
    env)
      shift
      while [[ $1 == *=* ]]; do export "$1"; shift; done
      dry_form "$@" ;;
    python3)
      shift
      case $1 in
        -m) [ "$2" = pytest ] || { echo "dry_form: no dry form for python3 -m $2"; return 9; }
            shift 2
            python3 -m pytest "$@" --collect-only -q ;;
        # Evaluates setup.py (torch, the toolkit, the arch list); compiles nothing.
        setup.py) python3 setup.py --version ;;
        *.py) python3 bench/dry_run.py "$@" ;;
        *) echo "dry_form: no dry form for python3 $1"; return 9 ;;
      esac ;;
    compute-sanitizer)
      shift
      while [[ $1 == --* ]]; do shift 2; done  # its options, each with a value
      dry_form "$@" ;;
    "$native"/*) native_flags_known "$@" ;;
    ctest) echo "would run: $*"; command -v ctest >/dev/null || echo "(no ctest here)" ;;
    *)
      if declare -F "$1" >/dev/null; then "$1" --dry-run "${@:2}"
      else echo "dry_form: no dry form for $1"; return 9; fi ;;
  esac
}

# native_flags_known BINARY ARGS...: every --flag in ARGS is one BINARY's source parses
# (csrc/cuda/bench/BINARY.cu compares each flag as `flag == "--name"`).
native_flags_known() {
  local src arg bad=0
  src=csrc/cuda/bench/$(basename "$1").cu
  shift
  [ -f "$src" ] || { echo "no source $src"; return 9; }
  for arg in "$@"; do
    case $arg in
      --*) grep -qF -- "flag == \"$arg\"" "$src" || { echo "$src parses no $arg"; bad=1; } ;;
    esac
  done
  [ $bad = 0 ] && echo "flags known to $src: $*"
  return $bad
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

# MPS as a daemon of our own: its pipe and log folders are ours, exported only from
# mps_start on (a client finds the daemon through them).
mps_pipe=$work/mps/pipe mps_log=$work/mps/log
start_mps() {
  if [ "${1:-}" = --dry-run ]; then
    shift
    [ $# = 0 ] || { echo "start_mps: unknown arguments: $*"; return 2; }
    echo "would run: nvidia-cuda-mps-control -d, with CUDA_MPS_PIPE_DIRECTORY and" \
      "CUDA_MPS_LOG_DIRECTORY in a folder of our own; then one CUDA client, then get_server_list"
    command -v nvidia-cuda-mps-control >/dev/null || echo "(nvidia-cuda-mps-control is not here)"
    return 0
  fi
  [ $# = 0 ] || { echo "start_mps: unknown arguments: $*"; return 2; }
  command -v nvidia-cuda-mps-control >/dev/null || { echo "nvidia-cuda-mps-control not found"; return 3; }
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "nvidia-cuda-mps-control -d failed"; return 4; }
  # The server starts with the first client: make one, then see it listed.
  if ! python3 -c "import torch; torch.ones(1, device='cuda').sum().item(); print('a CUDA client ran')"; then
    cat "$CUDA_MPS_LOG_DIRECTORY"/*.log 2>/dev/null | tail -n 20
    return 5
  fi
  echo get_server_list | nvidia-cuda-mps-control | grep -q '[0-9]' || {
    echo "no MPS server is listed"
    return 6
  }
  echo "MPS server: $(echo get_server_list | nvidia-cuda-mps-control)"
}
stop_mps() {
  [ -n "$mps_tried" ] || return 0
  echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_pipe timeout 3 nvidia-cuda-mps-control >/dev/null 2>&1
  mps_tried=
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
export -f dry_form native_flags_known native_build start_mps

# (0) The machine, first: what every later step depends on.
any preflight python3 bench/gpu_facts.py machine --json "$raw/machine.json"
gpu_visible=
grep -q '"driver_version"' "$raw/machine.json" 2>/dev/null && gpu_visible=yes  # nvidia-smi saw one
[ -n "$dry$gpu_visible" ] ||
  echo "# no GPU visible: the GPU steps are skipped (bench/gpu_check.sh --dry-run checks them)" | tee -a "$log"

# (1) The build for sm_90 only, with the native build beside it (nice, so that setup.py,
# which more steps need, has the cores first).
if [ -z "$dry" ] && selected native_build; then
  native_start=$SECONDS
  (
    # timeout leads its own process group: cleanup ends the whole build through it.
    brk=()
    [ "${GPU_CHECK_BREAK:-}" = native_build ] && brk=(--gpu-check-broken-flag)
    timeout --kill-after=1 "$(($(limit_of native_build) - BOOKKEEPING))" \
      nice -n 10 bash -c 'native_build "$@"' _ "${brk[@]}" >"$raw/native_build.log" 2>&1 </dev/null &
    echo $! >"$work/native_build.pid"
    wait $!
    echo "$? $((SECONDS - native_start))" >"$work/native_build.done"
  ) &
  native_pid=$!
fi
host build env TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS="$jobs" python3 setup.py build_ext --inplace
any import python3 bench/gpu_facts.py pycomm --json "$raw/pycomm.json"

# (2) The native protocol and kernel tests, once the native build is done.
if [ -n "$dry" ] || ! selected native_build; then
  host native_build native_build
else
  wait "$native_pid"
  native_pid=
  read -r native_rc native_took <"$work/native_build.done" 2>/dev/null || native_rc=1 native_took=0
  { printf '\n==== native_build (limit %s s, beside build)\n' "$(limit_of native_build)"
    cat "$raw/native_build.log"; } >>"$log"
  record native_build "$(status_of "$native_rc" native_build)" "$native_took"
fi
native_tests_ready() { status_is_ok native_build && test -f "$native/CTestTestfile.cmake"; }
runnable native_tests "no native tests (native_build: no cmake, or it failed)" native_tests_ready &&
  host native_tests ctest --test-dir "$native" --output-on-failure -j "$jobs" --timeout 10

# (3) Ranks as threads of one process, one stream each: first a tiny grid of odd sizes
# (12 bytes up, pieces through a 64 KiB staging buffer; the bench counts #wrong), then the
# kernels' times against a device-copy floor and the empty-launch latency.
have_bench() { status_is_ok native_build && test -x "$bench"; }
runnable threads_tiny "no threads bench (native_build failed)" have_bench &&
  gpu threads_tiny "$bench" --ranks 2 --min-bytes 12 --max-bytes 768K --buffer-bytes 64K \
    --iters 2 --warmup 1 --timeout-ms 5000 --json "$raw/threads_tiny.json"
for n in 2 4 8; do
  runnable "threads_$n" "no threads bench (native_build failed)" have_bench &&
    gpu "threads_$n" "$bench" --ranks "$n" --min-bytes 8 --max-bytes 256M --iters 20 --warmup 3 \
      --timeout-ms 5000 --json "$raw/threads_$n.json"
done

# (4) compute-sanitizer on a short threads run. If it serializes the ranks' kernels, they
# wait for each other until the in-kernel bound (3 s) and the bench exits 3: the table
# shows the sanitizer's error count either way.
have_sanitizer() { have_bench && command -v compute-sanitizer >/dev/null; }
for tool in memcheck racecheck; do
  runnable "$tool" "no compute-sanitizer or no threads bench" have_sanitizer &&
    gpu "$tool" compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
      "$bench" --ranks 2 --min-bytes 12 --max-bytes 96K --buffer-bytes 32K --iters 1 --warmup 0 \
      --timeout-ms 3000
done

# (5) Two (then three) processes over CUDA IPC without MPS, values only, against a float64
# CPU reference: tests/test_cuda_path.py's grid is every dtype x op x algorithm (auto,
# direct, two_shot, ring) x count (0, 1, 7: not a multiple of 16 bytes, 1023, 2^20 + 3:
# more than the 1 MiB staging buffer). Cheapest first; the 3-process grid, which takes the
# most turns on the GPU, last.
pycomm_ok() { status_is_ok import; }
# Python packages the preflight found (bench/gpu_facts.py writes "NAME": true).
have_package() { grep -q "\"$1\": true" "$raw/machine.json" 2>/dev/null; }
ipc_ready() { pycomm_ok && have_package pytest; }
runnable ipc_tests "needs pycomm with CUDA (import) and pytest" ipc_ready &&
  gpu ipc_tests python3 -m pytest -v -p no:cacheprovider -rfEs \
    tests/test_cuda_kernels.py \
    tests/test_cuda_path.py::test_backend_registers_for_cuda_where_built \
    tests/test_cuda_path.py::test_graph_capture_is_refused_clearly \
    tests/test_cuda_path.py::test_large_in_pieces_and_async \
    "tests/test_cuda_path.py::test_all_reduce_grid[2]" \
    tests/test_cuda_path.py::test_ddp_ring_hook_on_cuda \
    tests/test_cuda_path.py::test_sync_batchnorm_under_ring_hook \
    tests/test_cuda_path.py::test_backend_serves_cuda_tensors \
    tests/test_cuda_path.py::test_a_late_peer_kernel_times_out_on_the_gpu \
    "tests/test_cuda_path.py::test_all_reduce_grid[3]"

# (6) Processes under MPS, when it starts: values and times of 2, 3 and 4 ranks, beside NCCL
# (skipped with its reason before 2.30) and symmetric memory's one-shot and two-shot.
have_mps_control() { command -v nvidia-cuda-mps-control >/dev/null; }
if [ -z "$dry" ] && selected mps_start && have_mps_control; then
  mps_tried=1
  export CUDA_MPS_PIPE_DIRECTORY=$mps_pipe CUDA_MPS_LOG_DIRECTORY=$mps_log
fi
runnable mps_start "no nvidia-cuda-mps-control on this machine" have_mps_control &&
  gpu mps_start start_mps
mps=
if [ "$(step_status mps_start)" = ok ]; then mps=1; else stop_mps; fi
for n in 2 3 4; do
  runnable "mps_procs_$n" "MPS did not start (mps_start)" test -n "$mps" &&
    gpu "mps_procs_$n" python3 bench/cuda_allreduce_perf.py --nproc "$n" -b 8 -e 256M -f 32 \
      --iters 10 --warmup 3 --json "$raw/mps_procs_$n.json"
done

# (7) DDP on the one GPU with 2 ranks, under MPS when it started: the ring hook's gradients
# (fp32, bf16) against DDP's own all-reduce over gloo, then ResNet-50's step times.
[ -n "$dry" ] || note=${mps:+under MPS}
[ -n "$dry$mps" ] || note="without MPS: the ranks' kernels take turns"
ddp_ready() { pycomm_ok && have_package torchvision; }
runnable ddp_grads "needs pycomm with CUDA (import) and torchvision" ddp_ready &&
  gpu ddp_grads python3 bench/ddp_hook_check.py --nproc 2 --model resnet50 --image-size 112 \
    --batch-size 8 --json "$raw/ddp_grads.json"
runnable ddp_resnet50 "needs pycomm with CUDA (import) and torchvision" ddp_ready &&
  gpu ddp_resnet50 python3 bench/ddp_resnet50.py --device cuda --nproc 2 \
    --modes no-comm,sync-only,stock,ring,ring-bf16 --rounds 3 --steps 2 --warmup 2 --no-baseline \
    --json "$raw/ddp_resnet50.json" --plot ''
note=
# The CPU steps are no MPS clients (the daemon itself stops with the summary).
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

# (8) The CPU shared-memory path on the 16 cores CI does not have: the collectives DDP and
# FSDP use.
for n in 4 8; do
  host "cpu_collectives_$n" python3 bench/collectives_perf.py --nproc "$n" -b 64K -e 16M -f 256 \
    --collective all_reduce,all_gather,reduce_scatter --rounds 1 --min-time 0.1 --no-mpi \
    --no-deepspeed --json "$raw/cpu_collectives_$n.json"
done

# (9) Every planned step must have a line (a step skipped by mistake shows as missing), then
# the table.
summary_start=$SECONDS
stop_mps
while read -r name _; do
  if [ -z "$name" ] || [ "$name" = summary ] || recorded "$name"; then continue; fi
  if selected "$name"; then record "$name" "FAILED: never ran" 0
  else record "$name" "skipped: not selected" 0; fi
done <<<"$STEPS"
record summary ok "$((SECONDS - summary_start))" "$failures step(s) did not pass"
echo
cat "$out/table.txt" 2>/dev/null || echo "no table: see $log"
[ "$failures" = 0 ]
