# Sourced by bench/gpu_check.sh, whose variables and plan functions are set by then: how a
# step runs (within its limit, its output logged, its line recorded, the table rebuilt),
# in turn or beside the build, and its dry form on a machine without a GPU.

# record NAME STATUS SECONDS [NOTE]: NAME's line in steps.tsv, then the table again.
record() {
  local name=$1 status=$2 took=$3 note=${4:-}
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$took" "$(limit_of "$name")" "$note" >>"$steps_tsv"
  case $status in ok | skipped*) ;; *) failures=$((failures + 1)) ;; esac
  printf '   %-18s %s (%s s)%s\n' "$name" "$status" "$took" "${note:+: $note}"
  timeout 3 python3 -m bench.gpu.summary "$out" --raw "$raw" --limit "$total" >/dev/null 2>>"$log" ||
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
    bench/gpu/*.sh) "$1" --dry-run "${@:2}" ;;
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
