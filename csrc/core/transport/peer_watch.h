// Tells whether peer processes still run, cheaply enough to ask every few
// milliseconds while waiting on them. Uses pidfds, which report a process's
// exit even while it is an unreaped zombie (kill(pid, 0) would not).
#pragma once

#include <sys/types.h>

#include <vector>

namespace pycomm::core {

class PeerWatch {
 public:
  PeerWatch() = default;
  // pids[r] is rank r's process; ranks equal to `self_pid` are never checked.
  void watch(const std::vector<pid_t>& pids, pid_t self_pid);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // The lowest rank whose process has exited, or -1.
  int first_dead() const;
  pid_t pid_of(int rank) const { return pids_.at(size_t(rank)); }

 private:
  void close_all();
  std::vector<pid_t> pids_;
  std::vector<int> pidfds_;  // -1: not watched (self) or pidfd unavailable
  pid_t self_pid_ = 0;
};

}  // namespace pycomm::core
