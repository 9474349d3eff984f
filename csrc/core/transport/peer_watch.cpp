#include "peer_watch.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace pycomm::core {
namespace {

// Fallback when pidfds are unavailable: a zombie counts as dead.
bool process_exited(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", int(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return true;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* paren = std::strrchr(buf, ')');  // the command name may hold spaces
  return paren && (paren[2] == 'Z' || paren[2] == 'X');
}

}  // namespace

void PeerWatch::watch(const std::vector<pid_t>& pids, pid_t self_pid) {
  close_all();
  pids_ = pids;
  self_pid_ = self_pid;
  pidfds_.assign(pids.size(), -1);
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] == self_pid || pids[r] <= 0) continue;
    pidfds_[r] = int(syscall(SYS_pidfd_open, pids[r], 0));
  }
}

PeerWatch::~PeerWatch() { close_all(); }

void PeerWatch::close_all() {
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
  pidfds_.clear();
}

int PeerWatch::first_dead() const {
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (pids_[r] == self_pid_ || pids_[r] <= 0) continue;
    if (pidfds_[r] >= 0) {
      // A pidfd polls readable once its process has exited.
      struct pollfd p{pidfds_[r], POLLIN, 0};
      if (poll(&p, 1, 0) > 0) return int(r);
    } else if (process_exited(pids_[r])) {
      return int(r);
    }
  }
  return -1;
}

}  // namespace pycomm::core
