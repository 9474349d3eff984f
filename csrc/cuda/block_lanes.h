// How a kernel body sees the threads that run it, so that one body serves a
// CUDA block and a host thread. On the GPU a block has many threads that split
// the elements and meet at __syncthreads(); in the CPU protocol test one host
// thread is a whole block (threads == 1) and the block syncs are no-ops.
#pragma once

#include "host_device.h"

namespace pycomm::cuda {

struct Lanes {
  unsigned thread;   // this thread's index in its block
  unsigned threads;  // threads per block
  int block;
  int blocks;
};

struct DeviceBlockSync {
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

// One host thread per block: nothing to meet.
struct HostBlockSync {
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
