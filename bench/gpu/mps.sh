# Sourced by bench/gpu_check.sh, whose variables and plan functions are set by then: the MPS
# daemon of our own that the process timings run under: start it, find it, stop it.

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
