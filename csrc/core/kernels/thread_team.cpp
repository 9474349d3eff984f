#include "thread_team.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <system_error>

#include "../call_profile.h"
#include "../thread_name.h"
#include "../transport/wait_primitives.h"
#include "reduce_kernels.h"

namespace pycomm::core {
namespace {

constexpr uint64_t kStop = uint64_t(1) << 63;
constexpr uint64_t kNumberMask = 0xffffffffull;
constexpr int kShareShift = 32;

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

ThreadTeam::ThreadTeam(int size, size_t share_bytes, double spin_us)
    : size_(std::max(1, size)), share_bytes_(std::max<size_t>(64, share_bytes)), spin_us_(spin_us) {}

ThreadTeam::~ThreadTeam() {
  if (helpers_.empty()) return;
  if (helpers_pid_ != getpid()) {
    // A forked child has the handles but not the threads: neither joined nor
    // detached (both need the thread), the handles are left behind.
    new std::vector<std::thread>(std::move(helpers_));
    return;
  }
  stop_helpers();
}

int ThreadTeam::shares_for(size_t bytes) const {
  if (size_ <= 1) return 1;
  return int(std::min<size_t>(size_t(size_), std::max<size_t>(1, bytes / share_bytes_)));
}

bool ThreadTeam::try_claim() {
  if (busy_.exchange(true, std::memory_order_acquire)) return false;
  if ((helpers_.empty() && !start_helpers()) || helpers_pid_ != getpid()) {
    busy_.store(false, std::memory_order_release);
    return false;
  }
  return true;
}

bool ThreadTeam::start_helpers() {
  if (failed_to_start_) return false;
  helpers_pid_ = getpid();
  helpers_.reserve(size_t(size_ - 1));
  // The number of the last piece, read now: a helper that starts after the
  // next piece is posted must still take it.
  const uint32_t last = uint32_t(word_.load(std::memory_order_relaxed) & kNumberMask);
  try {
    for (int i = 1; i < size_; ++i) helpers_.emplace_back([this, i, last] { helper_loop(i, last); });
  } catch (const std::system_error&) {
    // No more threads on this host: the caller works alone from now on.
    stop_helpers();
    failed_to_start_ = true;
    return false;
  }
  return true;
}

void ThreadTeam::stop_helpers() {
  // The low word changes too: the futex compares only it, and a helper between
  // its last look and its sleep must not sleep through the stop.
  const uint64_t old = word_.load(std::memory_order_relaxed);
  word_.store(kStop | ((old + 1) & kNumberMask), std::memory_order_seq_cst);
  futex_wake_all(word_);
  for (auto& t : helpers_) t.join();
  helpers_.clear();
  word_.store(0, std::memory_order_relaxed);
}

void ThreadTeam::run(size_t n, size_t esize, int shares, Fn fn, void* body) {
  // Shares of whole 64-byte lines (so that no two threads write one line),
  // the lines dealt out evenly: no share is empty.
  grain_ = std::max<size_t>(1, 64 / std::max<size_t>(1, esize));
  lines_ = (n + grain_ - 1) / grain_;
  shares = int(std::min<size_t>(size_t(shares), lines_));
  fn_ = fn;
  body_ = body;
  n_ = n;
  shares_ = shares;
  pending_.store(shares - 1, std::memory_order_relaxed);
  const uint64_t old = word_.load(std::memory_order_relaxed);
  // seq_cst, as is the load of sleepers_ after it: a helper going to sleep
  // either sees the new word or is seen asleep (helper_loop).
  word_.store((uint64_t(shares) << kShareShift) | ((old + 1) & kNumberMask), std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(word_);
  std::exception_ptr error;
  try {
    run_share(0);
  } catch (...) {
    error = std::current_exception();
  }
  // Whatever happened, the helpers finish this piece before its fields may
  // change or the body's frame goes. Their shares are as large as the
  // caller's: a short wait, unless a helper was woken or lost its core.
  for (uint32_t spins = 0; pending_.load(std::memory_order_acquire) > 0; ++spins) {
    if (spins < 4096) cpu_relax();
    else sched_yield();
  }
  if (!error && helper_error_) error = helper_error_;
  helper_error_ = nullptr;
  busy_.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

void ThreadTeam::run_share(int index) {
  const size_t first = std::min(n_, lines_ * size_t(index) / size_t(shares_) * grain_);
  const size_t end = std::min(n_, lines_ * size_t(index + 1) / size_t(shares_) * grain_);
  if (end > first) fn_(body_, first, end - first);
}

void ThreadTeam::helper_loop(int index, uint32_t seen) {
  name_this_thread("pycomm-team");
  const uint64_t spin_ns = uint64_t(spin_us_ * 1000.0);
  for (;;) {
    uint64_t w = word_.load(std::memory_order_acquire);
    if (!(w & kStop) && uint32_t(w & kNumberMask) == seen) {
      const uint64_t until = now_ns() + spin_ns;
      for (uint32_t spins = 0;; ++spins) {
        w = word_.load(std::memory_order_acquire);
        if ((w & kStop) || uint32_t(w & kNumberMask) != seen) break;
        if ((spins & 63) == 0 && now_ns() >= until) {
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          w = word_.load(std::memory_order_seq_cst);
          if (!(w & kStop) && uint32_t(w & kNumberMask) == seen) futex_wait(word_, seen, 1000000000ull);
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
          continue;
        }
        cpu_relax();
      }
    }
    if (w & kStop) return;
    seen = uint32_t(w & kNumberMask);
    const int shares = int((w >> kShareShift) & 0x7fffffff);
    if (index >= shares) continue;  // this piece needs fewer threads
    try {
      run_share(index);
    } catch (...) {
      // The first helper's error goes to the caller (run() rethrows it).
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!helper_error_) helper_error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

// ----------------------------------------------------------------- the kernels

void team_copy(ThreadTeam& team, void* dst, const void* src, size_t bytes) {
  PartTimer timer(CallPart::kCopy);
  team.split(bytes, 1, [&](size_t first, size_t count) {
    std::memcpy(static_cast<char*>(dst) + first, static_cast<const char*>(src) + first, count);
  });
}

void team_reduce_sources(ThreadTeam& team, DType dtype, ReduceOp op, void* out, const void* const* srcs,
                         int nsrc, size_t n, int divisor) {
  PartTimer timer(CallPart::kReduce);
  const size_t esize = dtype_size(dtype);
  team.split(n, esize, [&](size_t first, size_t count) {
    if (first == 0) {
      reduce_sources(dtype, op, out, srcs, nsrc, count, divisor);
      return;
    }
    thread_local std::vector<const void*> shifted;
    shifted.resize(size_t(nsrc));
    for (int r = 0; r < nsrc; ++r) shifted[size_t(r)] = static_cast<const char*>(srcs[r]) + first * esize;
    reduce_sources(dtype, op, static_cast<char*>(out) + first * esize, shifted.data(), nsrc, count, divisor);
  });
}

void team_ring_first(ThreadTeam& team, DType dtype, const void* local, void* acc_out, size_t n) {
  PartTimer timer(CallPart::kCopy);  // a copy, widened for half types
  const size_t esize = dtype_size(dtype), asize = accum_size(dtype);
  team.split(n, esize, [&](size_t first, size_t count) {
    ring_first(dtype, static_cast<const char*>(local) + first * esize,
               static_cast<char*>(acc_out) + first * asize, count);
  });
}

void team_ring_middle(ThreadTeam& team, DType dtype, ReduceOp op, const void* partial, const void* local,
                      void* acc_out, size_t n) {
  PartTimer timer(CallPart::kReduce);
  const size_t esize = dtype_size(dtype), asize = accum_size(dtype);
  team.split(n, esize, [&](size_t first, size_t count) {
    ring_middle(dtype, op, static_cast<const char*>(partial) + first * asize,
                static_cast<const char*>(local) + first * esize, static_cast<char*>(acc_out) + first * asize,
                count);
  });
}

void team_ring_last(ThreadTeam& team, DType dtype, ReduceOp op, const void* partial, const void* local,
                    void* out, void* out2, size_t n, int divisor) {
  PartTimer timer(CallPart::kReduce);
  const size_t esize = dtype_size(dtype), asize = accum_size(dtype);
  team.split(n, esize, [&](size_t first, size_t count) {
    ring_last(dtype, op, static_cast<const char*>(partial) + first * asize,
              static_cast<const char*>(local) + first * esize, static_cast<char*>(out) + first * esize,
              out2 ? static_cast<char*>(out2) + first * esize : nullptr, count, divisor);
  });
}

}  // namespace pycomm::core
