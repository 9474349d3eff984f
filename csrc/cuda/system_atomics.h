// The few memory operations the cross-rank protocol needs, at system scope
// (flags live in peers' device memory and the status in host-mapped memory):
// a release store, an acquire load and a compare-and-swap, plus a nanosecond
// clock for deadlines and a pause for spin loops.
//
// Under nvcc both compilation passes use cuda::atomic_ref (st.release.sys /
// ld.acquire.sys on the device). Under g++ they use std::atomic_ref, whose
// ordering ThreadSanitizer checks: the CPU protocol test proves the kernels'
// data reads are ordered after the flags that publish them.
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

// True when *p held `expected` and now holds `desired`.
template <class T>
PYCOMM_HD bool compare_and_swap(T* p, T expected, T desired) {
#if defined(__CUDACC__)
  return ::cuda::atomic_ref<T, ::cuda::thread_scope_system>(*p).compare_exchange_strong(
      expected, desired, ::cuda::std::memory_order_acq_rel);
#else
  return std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired, std::memory_order_acq_rel);
#endif
}

// Nanoseconds from an arbitrary origin; only differences are used.
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
