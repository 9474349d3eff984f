#!/usr/bin/env bash
# The GPU check: one run of at most 9.5 minutes on a machine with one CUDA GPU (the H200
# pycomm borrows for ~15 minutes, start-up included) that returns, cheapest and most certain
# first: the machine's facts that need no torch (nvidia-smi, the tools, the packages, Python's
# headers), then torch's; the build and pycomm's CUDA status; the native protocol tests;
# the kernels' values and times with ranks as threads of one process; compute-sanitizer's
# memcheck, initcheck and synccheck with every rank a block of one launch; a smoke grid of
# every algorithm between processes over CUDA IPC, then the rest of the IPC tests; timings of
# processes under MPS beside a device copy's floor and NCCL, PyTorch's symmetric memory
# apart; ResNet-50's step times under MPS (DDP over NCCL beside the ring hook); DDP's
# gradients with the ring hook on ResNet-50; one table, with issue 48's targets judged.
# Steps marked "later" in STEPS (the 3-process MPS timings and IPC grid, the CPU sweeps on 16
# cores) do not fit the first run: a rerun names them with --steps.
#
# NCCL: the machine's torch 2.11 carries 2.28.9, which refuses two ranks on one GPU. Where
# the call carried bench/out/nccl (bench/gpu/build_nccl.sh: NCCL 2.30 for sm_90, a few
# functions, under 40 MiB), the benches' ranks and torch's facts load it ahead of torch's
# own (harness.peers.nccl.use_carried); their records name the NCCL that ran.
#   run(carry=["bench/out/nccl"], command="bash bench/gpu_check.sh")
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
# each step bench/gpu/summary.py rebuilds $OUT/results.json (the numbers) and $OUT/table.txt,
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
bash -n "$0" || exit 2  # a syntax error, here or in a part, fails at once, dry run or not
cd "$(dirname "$0")/.."
for part in bench/gpu/*.sh; do bash -n "$part" || exit 2; done

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
nccl_build        150 later
native_build      140 beside
native_tests       15
cpu_threads        12 later
threads_tiny       10
threads_2          10
threads_4          10
threads_8          10
memcheck           18
initcheck          15
synccheck          15
ipc_smoke          40
ipc_tests          82
mps_start          20
mps_procs_2        18
mps_procs_3        18 later
mps_procs_4        18
mps_symm_2         15
ddp_resnet50       45
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
# on CI's 2 busy cores rather than the GPU machine's 16, two dry runs at once in its test:
# they get three times the time, so that a slow host is not taken for a wrong command (one
# 14 s step's form was cut at 28 s on a loaded host; the limits stay the GPU machine's).
cut_of() { echo $(( ($(limit_of "$1") - BOOKKEEPING) * (${dry:-0} * 2 + 1) )); }

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

# How a step runs and is recorded, and the steps' commands that are functions (bench/gpu/).
for part in step_runner commands mps; do
  # shellcheck source=/dev/null
  source "bench/gpu/$part.sh"
done
export -f dry_form native_flags_known machine_facts native_build thread_scaling_sizes start_mps mps_pids stop_mps

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
beside torch_facts "" 0 python3 -m bench.gpu.facts torch --json "$raw/torch_facts.json"
beside native_build "dry run" 10 native_build
python_h=$(timeout 10 python3 -c 'from bench.gpu import facts; print(facts.python_headers()[0])')
if selected build && ! [ -f "$python_h" ]; then
  headers_why="$(python3 -V 2>&1) has no development headers (${python_h:-sysconfig did not answer})"
  record build "FAILED: no Python.h" 0 "$headers_why: install its -dev package"
else
  host build env TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS="$jobs" python3 setup.py build_ext --inplace
fi
collect torch_facts ""
any import python3 -m bench.gpu.facts pycomm --json "$raw/pycomm.json"
# (1b) A rerun's fallback, where the carried NCCL does not load on this machine (the
# preflight's facts say why): NCCL built here, from the source the call carried beside it.
host nccl_build bench/gpu/build_nccl.sh --src bench/out/nccl/nccl-src.tar.gz

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
# A failure's traceback is printed when it happens (tests/conftest.py), not only in the
# summary at the end, which a step cut at its limit never reaches (the first run lost the
# cold late peer's reason so).
pytest_steps=(env PYCOMM_TEST_FAILURES_AT_ONCE=1 python3 -m pytest -v -p no:cacheprovider -rfEs)
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
# beside a device copy of the same bytes (the floor) and NCCL (skipped with its reason
# before 2.30), three rounds in turns, then PyTorch's symmetric memory in a process of its own: its waits have no
# bound of ours, and a trap there would poison the CUDA context that pycomm's columns are
# timed in.
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
      --iters 10 --warmup 3 --rounds 3 --peers floor,pycomm,nccl --json "$raw/mps_procs_$n.json"
done
runnable mps_symm_2 "MPS did not start (mps_start)" test -n "$mps" &&
  gpu mps_symm_2 python3 bench/cuda_allreduce_perf.py --nproc 2 -b 8 -e 256M -f 32 \
    --iters 10 --warmup 3 --peers symm --json "$raw/mps_symm_2.json"
# ResNet-50's step times with 2 ranks on the one GPU, under MPS when it started: DDP over
# NCCL (the carried one; over gloo with the reason where NCCL refuses) beside the ring hook.
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
