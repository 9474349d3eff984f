#!/usr/bin/env bash
# The GPU check: one run of at most 9.5 minutes on a machine with one CUDA GPU (the H200
# pycomm borrows for ~15 minutes, start-up included) that returns, cheapest and most certain
# first: the machine's facts that need no torch (nvidia-smi, the tools, the packages, Python's
# headers), then torch's; the build and pycomm's CUDA status; the native protocol tests;
# the kernels' values and times with ranks as threads of one process; compute-sanitizer's
# memcheck, initcheck and synccheck with every rank a block of one launch; a smoke grid of
# every algorithm between processes over CUDA IPC, then the rest of the IPC tests; timings of
# processes under MPS beside NCCL, PyTorch's symmetric memory apart; DDP's gradients with the
# ring hook on ResNet-50; the 3-process IPC grid; one table. Steps marked "later" in STEPS
# (ResNet-50's step times, the 3-process MPS timings, the CPU sweep on 16 cores) do not fit
# the first run: a rerun names them with --steps.
#
#   bench/gpu_check.sh             on the GPU machine
#   bench/gpu_check.sh --dry-run   anywhere (CI): every step, "later" ones too, checked as far
#                                  as it can be without a GPU and recorded "skipped: ..."
#   bench/gpu_check.sh --steps ipc_tests,ddp_resnet50   a rerun of a few steps (and
#                                  preflight) on the same machine, on the build the first run
#                                  left; the others are recorded "skipped: not selected"
#
# Every step has a time limit (STEPS below: their sum, printed first, is the run's worst
# case and stays under 9.5 minutes); its output goes to $OUT/log.txt as it runs and its line to
# $OUT/steps.tsv when it ends; one that fails or runs out of time never stops the next. After
# each step bench/gpu_summary.py rebuilds $OUT/results.json (the numbers) and $OUT/table.txt,
# so $OUT (bench/out/gpu when unset) holds these four files whenever the run ends.
#
# Why the steps are what they are (docs/cuda.md, "One GPU, several ranks"): kernels of
# different processes take turns on one GPU unless MPS runs, so processes without MPS check
# values only, and times come from ranks as threads of one process or from processes under
# MPS (a daemon of our own, in folders of our own, stopped by a step of its own and again on
# exit). The GPU's settings are never changed. NCCL before 2.30 refuses two ranks on one
# GPU: bench/harness/peers/nccl.py.
#
# A dry run checks each step's command as it would run: a Python driver's real arguments are
# parsed and its imports made by bench/dry_run.py (a wrong flag fails argparse), pytest
# collects the selected tests, setup.py is evaluated, a native binary's flags are looked up
# in its source (so every test id and bench flag named here must exist in the tree).
# Two hooks let tests/test_gpu_check.py drive the bookkeeping without a GPU:
# GPU_CHECK_BREAK=STEP hands STEP's command a flag nothing accepts (a failing step does not
# stop the next), and GPU_CHECK_EXIT=STEP:RC[,STEP:RC] makes STEP's command exit RC (how a
# sanitizer's exit status is recorded).
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

# name, limit in seconds, in the order the steps are recorded. "beside": runs in the
# background from build's start (within its own limit), so it adds nothing to the total.
# "later": left out of a run unless --steps names it (a dry run checks it all the same).
STEPS="
preflight          26
build             140
torch_facts        45 beside
import             15
error_paths        20
native_build      140 beside
native_tests       15
cpu_threads        12
threads_tiny       10
threads_2          10
threads_4          10
threads_8          10
memcheck           18
initcheck          15
synccheck          15
ipc_smoke          40
ipc_tests          90
mps_start          20
mps_procs_2        18
mps_procs_3        18 later
mps_procs_4        18
mps_symm_2         15
ddp_resnet50       45 later
mps_stop           12
ddp_grads          30
ipc_grid_3         55 later
cpu_teams          45 later
cpu_numa           45 later
cpu_collectives_4  45 later
cpu_collectives_8  60 later
cpu_collectives_16 90 later
summary             5
"
limit_of() {
  local limit
  limit=$(awk -v n="$1" '$1 == n { print $2 }' <<<"$STEPS")
  [ -n "$limit" ] || { echo "gpu_check.sh: no step named $1" >&2; exit 2; }
  echo "$limit"
}
mark_of() { awk -v n="$1" '$1 == n { print $3 }' <<<"$STEPS"; }
for name in ${only//,/ }; do limit_of "$name" >/dev/null; done
# Seconds of each step's limit kept for its bookkeeping (the table after it).
BOOKKEEPING=4
# cut_of NAME: the seconds step NAME's command gets. A dry run's forms still import torch,
# on CI's 2 busy cores rather than the GPU machine's 16: they get twice the time, so that a
# slow host is not taken for a wrong command (the limits stay the GPU machine's).
cut_of() { echo $(( ($(limit_of "$1") - BOOKKEEPING) * (${dry:-0} + 1) )); }

# chosen NAME: whether a real run with these arguments runs step NAME. preflight and
# summary always run; mps_stop runs wherever mps_start does (the daemon must not outlive
# its steps).
chosen() {
  case $1 in
    preflight | summary) return 0 ;;
    mps_stop) chosen mps_start; return ;;
  esac
  if [ -n "$only" ]; then [[ $only == *",$1,"* ]]; else [ "$(mark_of "$1")" != later ]; fi
}
# selected NAME: whether this run walks step NAME: what a real run chooses, and in a dry run
# without --steps every step, so that a later run's commands are checked too.
selected() { chosen "$1" || { [ -n "$dry" ] && [ -z "$only" ]; }; }
why_not_selected() {
  if [ -z "$only" ] && [ "$(mark_of "$1")" = later ]; then
    echo "skipped: later (--steps $1)"
  else
    echo "skipped: not selected"
  fi
}

total=0
while read -r name limit mark; do
  [ -n "$name" ] && [ "$mark" != beside ] && chosen "$name" && total=$((total + limit))
done <<<"$STEPS"

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
mps_tried=
declare -A beside_pid=() beside_cmd=()

cleanup() {
  local name
  for name in "${!beside_pid[@]}"; do  # each beside step's timeout leads its process group
    [ -f "$work/$name.pid" ] && kill -- "-$(cat "$work/$name.pid")" 2>/dev/null
  done
  [ -z "$mps_tried" ] || stop_mps
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "# bench/gpu_check.sh${dry:+ --dry-run}${only:+ --steps ${only:1:-1}}: $(grep -c . <<<"$STEPS")" \
  "steps, at most $total s in all (the sum of the limits of the steps a run takes; each is cut" \
  "at its own); output in $out" | tee -a "$log"
awk 'NF >= 2 { printf "#   %-18s %4d s%s\n", $1, $2,
               ($3 == "beside" ? " (beside build)" : $3 == "later" ? " (later: --steps " $1 ")" : "") }' \
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

# skip_rc=RC:REASON, set around a step, records that step's exit status RC as
# "skipped: REASON": an outcome that says the check could not be made, not that it failed.
skip_rc=
status_of() {  # the status of step $2, whose command exited with $1
  case $1 in
    0) echo ok ;;
    124 | 137) echo "TIMEOUT at $(cut_of "$2") s" ;;
    "${skip_rc%%:*}") echo "skipped: ${skip_rc#*:}" ;;
    *) echo "FAILED rc=$1" ;;
  esac
}

# command_of NAME WHY CMD...: sets cmd to what step NAME runs: CMD, or its dry form in a
# dry run (with WHY set), with the test hooks applied.
command_of() {
  local name=$1 why=$2 hook code
  shift 2
  [ "${GPU_CHECK_BREAK:-}" = "$name" ] && set -- "$@" --gpu-check-broken-flag
  [ -n "$dry" ] && [ -n "$why" ] && set -- dry_form "$@"
  for hook in $(tr , " " <<<"${GPU_CHECK_EXIT:-}"); do
    if [ "${hook%%:*}" = "$name" ]; then
      code=${hook#*:}
      set -- bash -c 'echo "GPU_CHECK_EXIT: the step exits $0 instead of running"; exit "$0"' "$code"
    fi
  done
  cmd=("$@")
}

# finish NAME WHY RC SECONDS: records how step NAME ended ($note, when set, goes with it).
# A dry run's pass of a step with WHY set is "skipped: WHY".
note=
finish() {
  local name=$1 why=$2 rc=$3 took=$4 status
  status=$(status_of "$rc" "$name")
  if [ -n "$dry" ] && [ -n "$why" ]; then
    if [ "$rc" = 0 ]; then record "$name" "skipped: $why" "$took" "dry form ok"
    else record "$name" "$status (dry run)" "$took"; fi
  else
    record "$name" "$status" "$took" "$note"
  fi
}

# step NAME DRY_WHY CMD...: runs CMD (a program or an exported function) within NAME's
# limit, its output appended to log.txt as it comes and kept as $raw/NAME.log, and records
# how it ended. With DRY_WHY set, a dry run runs CMD's dry form instead.
step() {
  local name=$1 why=$2 limit from start rc
  shift 2
  if ! selected "$name"; then
    record "$name" "$(why_not_selected "$name")" 0
    return
  fi
  limit=$(limit_of "$name") || exit 2  # a step the plan does not know: the script is wrong
  command_of "$name" "$why" "$@"
  printf '\n==== %s (limit %s s): %s\n' "$name" "$limit" "${cmd[*]}" >>"$log"
  echo "== $name"
  from=$(stat -c %s "$log") start=$SECONDS
  timeout --kill-after=1 "$(cut_of "$name")" bash -c '"$@"' _ "${cmd[@]}" >>"$log" 2>&1 </dev/null
  rc=$?
  tail -c +"$((from + 1))" "$log" >"$raw/$name.log"
  finish "$name" "$why" "$rc" "$((SECONDS - start))"
}

# beside NAME DRY_WHY NICENESS CMD...: starts step NAME in the background, at NICENESS,
# within its own limit; collect NAME records it. Its output is kept apart until then, so
# that log.txt reads step by step.
beside() {
  local name=$1 why=$2 niceness=$3
  shift 3
  selected "$name" || return 0
  command_of "$name" "$why" "$@"
  echo "== $name (beside build)"
  (
    start=$SECONDS
    # timeout leads its own process group: cleanup ends the whole step through it.
    timeout --kill-after=1 "$(cut_of "$name")" \
      nice -n "$niceness" bash -c '"$@"' _ "${cmd[@]}" >"$raw/$name.log" 2>&1 </dev/null &
    echo $! >"$work/$name.pid"
    wait $!
    echo "$? $((SECONDS - start))" >"$work/$name.done"
  ) &
  beside_pid[$name]=$! beside_cmd[$name]=${cmd[*]}
}
collect() {  # collect NAME DRY_WHY: waits for step NAME (started by beside) and records it
  local name=$1 why=$2 rc took
  if ! selected "$name"; then
    record "$name" "$(why_not_selected "$name")" 0
    return
  fi
  wait "${beside_pid[$name]}"
  unset "beside_pid[$name]"
  read -r rc took <"$work/$name.done" 2>/dev/null || rc=1 took=0
  { printf '\n==== %s (limit %s s, beside build): %s\n' "$name" "$(limit_of "$name")" \
      "${beside_cmd[$name]}"
    cat "$raw/$name.log"; } >>"$log"
  finish "$name" "$why" "$rc" "$took"
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

# machine_facts JSON: what needs neither torch nor the GPU, written first, then
# whether the driver answers: `nvidia-smi -L` within 20 s (a fresh machine's first call
# starts the driver), its GPU lines deciding which steps run, then the GPU's fields.
machine_facts() {
  local json=${1:?machine_facts JSON} start rc
  [ $# = 1 ] || { echo "machine_facts: unknown arguments: ${*:2}"; return 2; }
  python3 bench/gpu_facts.py host --json "$json" || return
  echo "\$ timeout 20 nvidia-smi -L"
  start=$SECONDS
  timeout 20 nvidia-smi -L
  rc=$?
  echo "nvidia-smi -L: rc $rc after $((SECONDS - start)) s"  # gpu_check.sh reads this line
  # The fields' query fits in this step's limit only after a prompt answer.
  [ "$rc" = 0 ] && [ $((SECONDS - start)) -lt 15 ] && python3 bench/gpu_facts.py smi --json "$json"
  return 0
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

# error_paths: an error raised in pycomm's C++ reaches Python as the exception it names,
# in a process of its own; where it crashes instead (the first GPU run's ipc_smoke died so,
# in test_sum_into_rejects_bad_input), the compilers and libraries behind the build and
# the crash's backtrace (cuda-gdb debugs host code too).
error_paths() {
  local code='import torch, pycomm
try:
    torch.ops.pycomm.sum_into_(torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
except TypeError as e:
    print("a TypeError came through:", str(e).splitlines()[0])'
  if [ "${1:-}" = --dry-run ]; then
    shift
    [ $# = 0 ] || { echo "error_paths: unknown arguments: $*"; return 2; }
    python3 -c "${code/torch.ops.pycomm.sum_into_(/print(torch.ops.pycomm.sum_into_, }"
    return
  fi
  [ $# = 0 ] || { echo "error_paths: unknown arguments: $*"; return 2; }
  python3 -c "$code" && return 0
  echo "the error crashed the process (rc $?); what built it and what it loads:"
  echo "CXX=${CXX:-} CC=${CC:-}; c++: $(command -v c++) g++: $(command -v g++)"
  for cc in c++ g++ /opt/gcc/bin/g++; do command -v "$cc" >/dev/null && echo "$cc: $("$cc" --version | head -n 1)"; done
  ldd pycomm/_C*.so | grep -E 'stdc\+\+|gcc_s|libc\.so|torch_python'
  python3 -c 'import torch; print("torch built with:", torch.__config__.show().splitlines()[1:4])'
  if command -v cuda-gdb >/dev/null; then
    echo "the backtrace:"
    timeout 40 cuda-gdb -q -batch -ex run -ex bt -ex quit --args python3 -c "$code" 2>&1 | grep -v '^\[' | tail -n 40
  fi
  return 1
}

# MPS as a daemon of our own: its pipe and log folders are ours, exported only from
# mps_start on (a client finds the daemon through them).
export mps_pipe=$work/mps/pipe mps_log=$work/mps/log
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
# Our MPS processes: the control daemon and its servers, ours by user and by the pipe
# folder in their environment or their parent (never another user's daemon, or one of the
# image's own). Matched on the command line: a process's name stops at 15 characters.
mps_pids() {
  local pid daemons=" "
  ours() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -qxF "CUDA_MPS_PIPE_DIRECTORY=$mps_pipe"; }
  for pid in $(pgrep -u "$(id -u)" -f '^([^ ]*/)?nvidia-cuda-mps-control( |$)'); do
    ours "$pid" && daemons+="$pid " && echo "$pid"
  done
  for pid in $(pgrep -u "$(id -u)" -f '^([^ ]*/)?nvidia-cuda-mps-server( |$)'); do
    if ours "$pid" || [[ $daemons == *" $(ps -o ppid= -p "$pid" | tr -d ' ') "* ]]; then
      echo "$pid"
    fi
  done
}
# stop_mps: asks our daemon to quit, its servers given 2 s to let their clients go, then
# makes sure it is gone: a daemon left behind would hold the GPU for whoever comes next.
stop_mps() {
  local pids i
  if [ "${1:-}" = --dry-run ]; then
    shift
    [ $# = 0 ] || { echo "stop_mps: unknown arguments: $*"; return 2; }
    echo "would run: echo 'quit -t 2' | nvidia-cuda-mps-control, then wait for our daemon and" \
      "servers (pgrep, by the pipe folder in their environment) and kill any left"
    return 0
  fi
  [ $# = 0 ] || { echo "stop_mps: unknown arguments: $*"; return 2; }
  if command -v nvidia-cuda-mps-control >/dev/null; then
    echo "quit -t 2" | CUDA_MPS_PIPE_DIRECTORY=$mps_pipe timeout 4 nvidia-cuda-mps-control
  fi
  for i in $(seq 12); do
    pids=$(mps_pids)
    [ -n "$pids" ] || { echo "MPS stopped"; return 0; }
    sleep 0.25
  done
  echo "MPS processes left after quit: $(tr '\n' ' ' <<<"$pids"); killing them"
  kill $pids 2>/dev/null
  sleep 0.5
  pids=$(mps_pids)
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null
  sleep 0.2
  [ -z "$(mps_pids)" ] || { echo "MPS processes survive: $(mps_pids | tr '\n' ' ')"; return 7; }
  echo "MPS stopped (killed)"
  return 8  # stopped, but not as asked: worth a look
}
export -f dry_form native_flags_known machine_facts native_build thread_scaling_sizes error_paths start_mps mps_pids stop_mps

# (0) The machine, first: what every later step depends on, without torch. The GPU steps
# run when `nvidia-smi -L` lists a GPU; or when it did not answer in time but a device node
# exists (a slow driver start must not skip the whole run: those steps speak for themselves).
any preflight machine_facts "$raw/machine.json"
gpu_visible=
smi_rc=$(sed -n 's/^nvidia-smi -L: rc \([0-9]*\) .*/\1/p' "$raw/preflight.log" 2>/dev/null)
if grep -Eq '^GPU [0-9]+: ' "$raw/preflight.log" 2>/dev/null; then
  gpu_visible=yes
elif [[ $smi_rc =~ ^(|124|137)$ ]] && compgen -G '/dev/nvidia[0-9]*' >/dev/null; then
  gpu_visible=unknown
fi
if [ -z "$dry" ]; then
  case $gpu_visible in
    "") echo "# no GPU visible: the GPU steps are skipped (bench/gpu_check.sh --dry-run checks them)" ;;
    unknown) echo "# nvidia-smi -L did not answer, but /dev/nvidia* exists: the GPU steps run" ;;
  esac | tee -a "$log"
fi
# Packages are looked up here, not in the preflight's facts: a step cut short must not
# make them look missing.
have_package() {
  timeout 10 python3 -c 'import importlib.util as u, sys; sys.exit(u.find_spec(sys.argv[1]) is None)' "$1"
}

# (1) The build for sm_90 only, with torch's facts (a cold import, CUDA's start and NCCL's
# loading: slow on a fresh machine, needed by no step) and the native build beside it (nice,
# so that setup.py, which more steps need, has the cores first). Without Python's headers the
# build would spend its whole limit failing: that is recorded at once instead.
beside torch_facts "" 0 python3 bench/gpu_facts.py torch --json "$raw/torch_facts.json"
beside native_build "dry run" 10 native_build
python_h=$(timeout 10 python3 -c 'import sys; sys.path.insert(0, "bench"); import gpu_facts
print(gpu_facts.python_headers()[0])')
if selected build && ! [ -f "$python_h" ]; then
  headers_why="$(python3 -V 2>&1) has no development headers (${python_h:-sysconfig did not answer})"
  record build "FAILED: no Python.h" 0 "$headers_why: install its -dev package"
else
  host build env TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS="$jobs" python3 setup.py build_ext --inplace
fi
collect torch_facts ""
any import python3 bench/gpu_facts.py pycomm --json "$raw/pycomm.json"
runnable error_paths "needs pycomm (import)" status_is_ok import &&
  any error_paths error_paths

# (2) The native protocol and kernel tests, once the native build is done.
collect native_build "dry run"
native_tests_ready() { status_is_ok native_build && test -f "$native/CTestTestfile.cmake"; }
runnable native_tests "no native tests (native_build: no cmake, or it failed)" native_tests_ready &&
  host native_tests ctest --test-dir "$native" --output-on-failure -j "$jobs" --timeout 10

# (2b) The copy and reduction loops of one large message on 1, 2, 4, 8 and 16 of the host's
# cores against memcpy on as many (issue 35's calibration of the scaling model: what a rank's
# thread team could gain on a many-core host), while the cores are quiet.
have_thread_scaling() { status_is_ok native_build && test -x "$native/thread_scaling"; }
runnable cpu_threads "no thread_scaling bench (native_build failed)" have_thread_scaling &&
  host cpu_threads thread_scaling_sizes

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

# (4) compute-sanitizer on a short threads run whose ranks are the blocks of one launch:
# a sanitizer may run separate launches one at a time, and then each rank's kernel would wait
# out its bound for a peer that cannot start. memcheck (out of bounds, misaligned),
# initcheck (reads of memory never written), synccheck (barriers a block does not reach
# whole); racecheck is left out, as it looks only at shared memory, which these kernels do
# not use. Should the sanitizer still serialize the blocks, the bench's waits time out
# (exit 3): the check could not be made, which is not a failure; an error count (exit 9) is.
have_sanitizer() { have_bench && command -v compute-sanitizer >/dev/null; }
skip_rc="3:sanitizer serialized the ranks"
for tool in memcheck initcheck synccheck; do
  runnable "$tool" "no compute-sanitizer or no threads bench" have_sanitizer &&
    gpu "$tool" compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
      "$bench" --ranks 2 --min-bytes 12 --max-bytes 96K --buffer-bytes 32K --iters 1 --warmup 0 \
      --timeout-ms 3000 --one-launch
done
skip_rc=

# (5) Processes over CUDA IPC without MPS, values only, against a float64 CPU reference.
# Without MPS the ranks' kernels take turns on the GPU, so every crossing of a flag costs
# turns: the cheapest and most telling first. ipc_smoke: the kernels' own tests, the
# registration, graph capture refused, a small grid that reaches every algorithm at counts
# 1, 7 and 2^20 + 3 (pieces through the staging buffer), and a late peer's kernel timing out
# on the GPU once set up. ipc_tests: the rest on 2 ranks (the late peer again, before the
# set-up, which must not wait for the peer's queued work), the full grid (every dtype x op x
# algorithm x count, the ranks' bytes compared once at the end) last, so that its being cut
# loses nothing else. ipc_grid_3: the same grid on 3 ranks, which take the most turns, a step of its own
# at the end of the run.
pycomm_ok() { status_is_ok import; }
ipc_ready() { pycomm_ok && have_package pytest; }
pytest_steps=(python3 -m pytest -v -p no:cacheprovider -rfEs)
# In a worker process where pytest-xdist is there: a test that crashes its process is
# recorded as failed and the next tests run in a fresh worker, instead of the crash ending
# the step (the first GPU run lost the rest of ipc_smoke so).
[ -z "$dry" ] && have_package xdist && pytest_steps+=(-n 1)
path_test=tests/test_cuda_path.py
runnable ipc_smoke "needs pycomm with CUDA (import) and pytest" ipc_ready &&
  gpu ipc_smoke "${pytest_steps[@]}" \
    tests/test_cuda_kernels.py \
    "$path_test::test_backend_registers_for_cuda_where_built" \
    "$path_test::test_graph_capture_is_refused_clearly" \
    "$path_test::test_all_reduce_smoke[2]" \
    "$path_test::test_a_late_peer_kernel_times_out_on_the_gpu[warm]"
runnable ipc_tests "needs pycomm with CUDA (import) and pytest" ipc_ready &&
  gpu ipc_tests "${pytest_steps[@]}" \
    "$path_test::test_large_in_pieces_and_async" \
    "$path_test::test_backend_serves_cuda_tensors" \
    "$path_test::test_ddp_ring_hook_on_cuda" \
    "$path_test::test_sync_batchnorm_under_ring_hook" \
    "$path_test::test_a_late_peer_kernel_times_out_on_the_gpu[cold]" \
    "$path_test::test_all_reduce_grid[2]"

# (6) Processes under MPS, when it starts: values and times of 2 (and later 3) and 4 ranks
# beside NCCL (skipped with its reason before 2.30), then PyTorch's symmetric memory in a
# process of its own: its waits have no bound of ours, and a trap there would poison the
# CUDA context that pycomm's columns are timed in.
have_mps_control() { command -v nvidia-cuda-mps-control >/dev/null; }
if [ -z "$dry" ] && chosen mps_start && have_mps_control; then
  mps_tried=1
  export CUDA_MPS_PIPE_DIRECTORY=$mps_pipe CUDA_MPS_LOG_DIRECTORY=$mps_log
fi
runnable mps_start "no nvidia-cuda-mps-control on this machine" have_mps_control &&
  gpu mps_start start_mps
mps=
[ "$(step_status mps_start)" = ok ] && mps=1
for n in 2 3 4; do
  runnable "mps_procs_$n" "MPS did not start (mps_start)" test -n "$mps" &&
    gpu "mps_procs_$n" python3 bench/cuda_allreduce_perf.py --nproc "$n" -b 8 -e 256M -f 32 \
      --iters 10 --warmup 3 --peers pycomm,nccl --json "$raw/mps_procs_$n.json"
done
runnable mps_symm_2 "MPS did not start (mps_start)" test -n "$mps" &&
  gpu mps_symm_2 python3 bench/cuda_allreduce_perf.py --nproc 2 -b 8 -e 256M -f 32 \
    --iters 10 --warmup 3 --peers symm --json "$raw/mps_symm_2.json"
# ResNet-50's step times with 2 ranks on the one GPU, under MPS when it started.
[ -n "$dry" ] || note=${mps:+under MPS}
[ -n "$dry$mps" ] || note="without MPS: the ranks' kernels take turns"
ddp_ready() { pycomm_ok && have_package torchvision; }
runnable ddp_resnet50 "needs pycomm with CUDA (import) and torchvision" ddp_ready &&
  gpu ddp_resnet50 python3 bench/ddp_resnet50.py --device cuda --nproc 2 \
    --modes no-comm,sync-only,stock,ring,ring-bf16 --rounds 3 --steps 2 --warmup 2 --no-baseline \
    --json "$raw/ddp_resnet50.json" --plot ''
note=
runnable mps_stop "MPS was not started" test -n "$mps_tried" &&
  host mps_stop stop_mps
[ "$(step_status mps_stop)" = ok ] && mps_tried=
# The steps after this are no MPS clients.
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

# (7) DDP on the one GPU with 2 ranks: the ring hook's gradients (fp32, bf16) on ResNet-50
# against DDP's own all-reduce over gloo; then the 3-process IPC grid.
runnable ddp_grads "needs pycomm with CUDA (import) and torchvision" ddp_ready &&
  gpu ddp_grads python3 bench/ddp_hook_check.py --nproc 2 --model resnet50 --image-size 112 \
    --batch-size 8 --json "$raw/ddp_grads.json"
runnable ipc_grid_3 "needs pycomm with CUDA (import) and pytest" ipc_ready &&
  gpu ipc_grid_3 "${pytest_steps[@]}" "$path_test::test_all_reduce_grid[3]"

# (8) The CPU shared-memory path on the 16 cores CI does not have: a rank's thread team
# (2 ranks, teams of 1 to 8 threads, in turns), NUMA nodes, then the collectives DDP and
# FSDP use.
host cpu_teams python3 bench/team_perf.py --nproc 2 --threads 1,2,4,8 -b 1M -e 64M -f 4 \
  --collective all_reduce,all_gather --rounds 3 --min-time 0.6 --json "$raw/cpu_teams.json"
# The two-level all-reduce of 8 ranks pinned to the host's NUMA nodes (posed as 2 where it
# has one: then its cost alone) against the flat ring and gloo.
host cpu_numa python3 bench/numa_perf.py --nproc 8 -b 256K -e 64M -f 4 --rounds 3 \
  --min-time 0.4 --json "$raw/cpu_numa.json"
for n in 4 8 16; do
  host "cpu_collectives_$n" python3 bench/collectives_perf.py --nproc "$n" -b 64K -e 16M -f 256 \
    --collective all_reduce,all_gather,reduce_scatter --rounds 1 --min-time 0.1 --no-mpi \
    --no-deepspeed --json "$raw/cpu_collectives_$n.json"
done

# (9) Every planned step must have a line (a step skipped by mistake shows as missing), then
# the table.
summary_start=$SECONDS
while read -r name _; do
  if [ -z "$name" ] || [ "$name" = summary ] || recorded "$name"; then continue; fi
  if selected "$name"; then record "$name" "FAILED: never ran" 0
  else record "$name" "$(why_not_selected "$name")" 0; fi
done <<<"$STEPS"
record summary ok "$((SECONDS - summary_start))" "$failures step(s) did not pass"
echo
cat "$out/table.txt" 2>/dev/null || echo "no table: see $log"
[ "$failures" = 0 ]
