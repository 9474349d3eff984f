// The low-level pieces every wait in the core is made of: the spin hint, and
// a futex on the low word of a 64-bit counter in shared memory. The policy
// built on them (spin, then yield, then sleep; deadlines, liveness) lives with
// their users: Session::wait_at_least for collectives, P2PEngine for
// point-to-point.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace pycomm::core {

// Tells the core that this thread spins, so a sibling hyperthread (or the
// peer it waits for, on the same core) gets the pipeline.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

static_assert(sizeof(std::atomic<uint64_t>) == 8, "counters must be plain 64-bit words");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "futexes wait on the low 32 bits of a 64-bit counter");

inline uint32_t* low_word(const std::atomic<uint64_t>& w) {
  return reinterpret_cast<uint32_t*>(const_cast<std::atomic<uint64_t>*>(&w));
}

// Sleeps while the low word of `w` equals `expected`, at most timeout_ns.
// Not FUTEX_PRIVATE: the word is shared between processes.
inline void futex_wait(const std::atomic<uint64_t>& w, uint32_t expected, uint64_t timeout_ns) {
  struct timespec ts;
  ts.tv_sec = time_t(timeout_ns / 1000000000ull);
  ts.tv_nsec = long(timeout_ns % 1000000000ull);
  syscall(SYS_futex, low_word(w), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void futex_wake_all(const std::atomic<uint64_t>& w) {
  syscall(SYS_futex, low_word(w), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace pycomm::core
