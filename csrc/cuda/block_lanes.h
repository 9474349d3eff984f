// How a kernel body sees the threads that run it, so that one body serves a
// CUDA block and a host thread. On the GPU a block has many threads that split
// the elements and meet at __syncthreads(); in the CPU protocol test one host
// thread is a whole block (threads == 1) and the block syncs are no-ops.
#pragma once

#include <cstdint>

#include "host_device.h"

namespace pycomm::cuda {

struct Lanes {
  unsigned thread;   // this thread's index in its block
  unsigned threads;  // threads per block
  int block;
  int blocks;
};

// What thread 0, which alone signals and waits, keeps across a body. On the
// GPU it lies in the block's shared memory: in registers every thread would
// hold it for the kernel's life, and at the 64-register cap the element loops
// spilled for it (ptxas, nvcc 13.0, sm_90).
struct WaitState {
  uint64_t deadline;  // clock_ns() past which the block's waits fail (signal_protocol.h)
  uint64_t epoch;     // the block's last barrier epoch (LaunchBarriers)
};

struct DeviceBlockSync {
  PYCOMM_HD static WaitState& wait_state() {
#if defined(__CUDA_ARCH__)
    __shared__ WaitState state;
    return state;
#else
    static WaitState state;  // not reached: a host thread runs a body with HostBlockSync
    return state;
#endif
  }
  PYCOMM_HD static void sync() {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
  // A sync that also tells every thread whether all threads passed `ok`.
  PYCOMM_HD static bool all(bool ok) {
#if defined(__CUDA_ARCH__)
    return __syncthreads_and(ok) != 0;
#else
    return ok;
#endif
  }
};

// One host thread per block: nothing to meet, and a WaitState of the thread's own.
struct HostBlockSync {
  static WaitState& wait_state() {
    static thread_local WaitState state;
    return state;
  }
  PYCOMM_HD static void sync() {}
  PYCOMM_HD static bool all(bool ok) { return ok; }
};

// Thread 0 signals and waits (`signal` returns false on a timeout) while the
// block's other threads wait at the syncs around it: the first sync puts every
// thread's earlier data accesses before thread 0's release stores, the second
// puts thread 0's acquire loads before every thread's later accesses. Returns
// false, on every thread, when the signal failed: the body then returns.
template <class Sync, class F>
PYCOMM_HD bool block_signal(const Lanes& l, F&& signal) {
  Sync::sync();
  bool ok = true;
  if (l.thread == 0) ok = signal();
  return Sync::all(ok);
}

}  // namespace pycomm::cuda
