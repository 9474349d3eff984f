// A rank's own threads for the copy and reduction of a large piece: the
// caller and size-1 helpers each take one contiguous share of the piece's
// elements. Every kernel the team runs is element-wise (an element's value
// depends on that element of each source alone, combined in rank order), so a
// result is bitwise the same whatever the team's size or the shares' bounds.
//
// The helpers start at the first split that is large enough (a communicator
// that only moves small messages never has them), spin a while for the next
// piece (the ring sends piece after piece) and then sleep on a futex. A split
// is pure local work, never a wait on a peer, so a team cannot hang a
// collective. Only one thread uses the team at a time: a split that finds it
// busy (point-to-point beside a collective) runs on its caller alone, as does
// one in a child forked after the helpers started.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "../dtypes.h"

namespace pycomm::core {

class ThreadTeam {
 public:
  // size: threads in all, the caller's included (1: the caller alone, and no
  // thread is ever started). share_bytes: the least a share may hold; a piece
  // splits into at most bytes / share_bytes shares. spin_us: how long an idle
  // helper spins for the next piece before it sleeps.
  ThreadTeam(int size, size_t share_bytes, double spin_us);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }
  // How many shares a piece of `bytes` splits into (1: the caller does it whole).
  int shares_for(size_t bytes) const;

  // Runs body(first, count) over elements [0, n) of `esize` bytes, in shares
  // of whole 64-byte lines (the last one ends at n); returns when every share
  // is done. The caller runs share 0. What a body throws, on any thread,
  // reaches the caller once every share is done.
  template <class Body>
  void split(size_t n, size_t esize, Body&& body) {
    const int shares = shares_for(n * esize);
    if (shares <= 1 || !try_claim()) {
      body(size_t(0), n);
      return;
    }
    run(n, esize, shares, [](void* b, size_t first, size_t count) { (*static_cast<Body*>(b))(first, count); },
        &body);
  }

 private:
  using Fn = void (*)(void*, size_t, size_t);
  bool try_claim();
  void run(size_t n, size_t esize, int shares, Fn fn, void* body);
  bool start_helpers();  // false: no thread could be started (the caller works alone)
  void stop_helpers();
  void helper_loop(int index, uint32_t seen);
  void run_share(int index);

  const int size_;
  const size_t share_bytes_;
  const double spin_us_;
  std::vector<std::thread> helpers_;
  pid_t helpers_pid_ = 0;  // the process that started them (a forked child has none)
  bool failed_to_start_ = false;
  std::atomic<bool> busy_{false};
  // The current piece: written by the caller before it bumps `word_`, read by
  // the helpers after they see the bump; not rewritten until `pending_` is 0.
  Fn fn_ = nullptr;
  void* body_ = nullptr;
  size_t n_ = 0, grain_ = 1, lines_ = 0;  // elements, a line's elements, lines
  int shares_ = 0;
  // Low 32 bits: the piece's number (the futex word); bits 32-62: its shares;
  // bit 63: stop. One word, so that a helper reads the number and the shares
  // of the same piece.
  std::atomic<uint64_t> word_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  // A body that threw on a helper (a kernel refusing its dtype or op): handed
  // to the caller, which rethrows it once every share is done.
  std::mutex error_mu_;
  std::exception_ptr helper_error_;
};

// The core's copy and reduction loops (reduce_kernels.h), split among a team.
void team_copy(ThreadTeam& team, void* dst, const void* src, size_t bytes);
void team_reduce_sources(ThreadTeam& team, DType dtype, ReduceOp op, void* out, const void* const* srcs,
                         int nsrc, size_t n, int divisor);
void team_ring_first(ThreadTeam& team, DType dtype, const void* local, void* acc_out, size_t n);
void team_ring_middle(ThreadTeam& team, DType dtype, ReduceOp op, const void* partial, const void* local,
                      void* acc_out, size_t n);
void team_ring_last(ThreadTeam& team, DType dtype, ReduceOp op, const void* partial, const void* local,
                    void* out, void* out2, size_t n, int divisor);

}  // namespace pycomm::core
