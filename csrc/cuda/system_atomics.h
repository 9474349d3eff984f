// The few memory operations the cross-rank protocol needs: at system scope
// (flags live in peers' device memory and the status in host-mapped memory,
// which a narrower scope does not order) a release store, a relaxed load for
// polling and an acquire load; at device scope one compare-and-swap, on a word
// of the rank's own device memory. Plus a nanosecond clock for deadlines and a
// pause for spin loops.
//
// Under nvcc both compilation passes use cuda::atomic_ref (st.release.sys,
// ld.relaxed.sys, ld.acquire.sys and atom.cas.gpu on the device). Under g++
// they use std::atomic_ref, whose ordering ThreadSanitizer checks: the CPU
// protocol test proves the kernels' data reads are ordered after the flags
// that publish them. There is no fence here on purpose: ThreadSanitizer does
// not model std::atomic_thread_fence (GCC warns that -fsanitize=thread does
// not support it), so a relaxed poll followed by an acquire fence could not
// be checked on the host. A satisfied poll is followed by an acquire load of
// the same flag instead (signal_protocol.h), which both builds run as is.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

#include "host_device.h"

#if defined(__CUDACC__)
#include <cuda/atomic>
#else
#include <atomic>
#endif

namespace pycomm::cuda {

template <class T>
PYCOMM_HD void store_release(T* p, T v) {
#if defined(__CUDACC__)
  ::cuda::atomic_ref<T, ::cuda::thread_scope_system>(*p).store(v, ::cuda::std::memory_order_release);
#else
  std::atomic_ref<T>(*p).store(v, std::memory_order_release);
#endif
}

template <class T>
PYCOMM_HD T load_acquire(const T* p) {
  T* q = const_cast<T*>(p);  // atomic_ref wants a mutable object; only loaded here
#if defined(__CUDACC__)
  return ::cuda::atomic_ref<T, ::cuda::thread_scope_system>(*q).load(::cuda::std::memory_order_acquire);
#else
  return std::atomic_ref<T>(*q).load(std::memory_order_acquire);
#endif
}

// A load that orders nothing but is never torn, cached in a register or
// hoisted out of a loop: what a poll needs. On the GPU an acquire load also
// invalidates the SM's L1 so that later plain loads miss it; a poll that
// fails has nothing to order, so it should not pay for that on every turn.
template <class T>
PYCOMM_HD T load_relaxed(const T* p) {
  T* q = const_cast<T*>(p);  // atomic_ref wants a mutable object; only loaded here
#if defined(__CUDACC__)
  return ::cuda::atomic_ref<T, ::cuda::thread_scope_system>(*q).load(::cuda::std::memory_order_relaxed);
#else
  return std::atomic_ref<T>(*q).load(std::memory_order_relaxed);
#endif
}

// True when *p held `expected` and now holds `desired`. Device scope: only
// for words in device memory that threads of one GPU alone touch (host-device
// atomics on host-mapped memory are promised only where
// cudaDevAttrHostNativeAtomicSupported is 1, which PCIe hosts are not).
// Relaxed: a caller that needs its winner's writes seen publishes them with a
// release store of its own.
template <class T>
PYCOMM_HD bool compare_and_swap_device(T* p, T expected, T desired) {
#if defined(__CUDACC__)
  return ::cuda::atomic_ref<T, ::cuda::thread_scope_device>(*p).compare_exchange_strong(
      expected, desired, ::cuda::std::memory_order_relaxed);
#else
  return std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired, std::memory_order_relaxed);
#endif
}

// Nanoseconds from an arbitrary origin; only differences, and deadlines taken
// from the same clock, are used. On the GPU %globaltimer, which is not the
// host's clock: a deadline must be computed where it is checked.
PYCOMM_HD uint64_t clock_ns() {
#if defined(__CUDA_ARCH__)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
#endif
}

// clock_ns() + ns, or the clock's end when that would wrap.
PYCOMM_HD uint64_t deadline_after(uint64_t ns) {
  const uint64_t now = clock_ns();
  return now + ns < now ? ~uint64_t(0) : now + ns;
}

// Between two polls of a flag, the `polls`-th. A GPU thread polls flat out (it
// owns its SM slot). A host thread yields, then sleeps: in the protocol test
// many more threads than cores wait, on a machine shared with other jobs, and
// the thread being waited for must get a core.
PYCOMM_HD void spin_pause(unsigned polls) {
#if !defined(__CUDA_ARCH__)
  if (polls < 16) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
#endif
}

}  // namespace pycomm::cuda
