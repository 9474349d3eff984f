// The flag and epoch protocol of the CUDA all-reduce kernels, in code that
// runs on the GPU and on host threads alike (see host_device.h).
//
// Epochs. Each launch gets `epoch_base` from the host and uses the values
// epoch_base + 1 .. epoch_base + epochs_used(args) (all_reduce_args.h) for its
// flags; the host then advances its base by epochs_used(args), the same on
// every rank because every rank launches the same sequence of collectives.
// Bases start at 0 on zeroed pads, so flags only ever increase.
//
// Deadlines. Every wait is bounded: a wait whose flag has not arrived after
// timeout_ns records the peer in the rank's DeviceStatus and makes its block
// leave the kernel; the other blocks of the rank see the status's
// `failed` flag in their own waits and leave too.
//
// Only one thread of a block (thread 0) calls these; block_signal()
// (block_lanes.h) orders the other threads' data accesses around it.
#pragma once

#include <cstdint>

#include "host_device.h"
#include "peer_memory.h"
#include "system_atomics.h"

namespace pycomm::cuda {

// What a waiting block needs to bound and report its wait.
struct Waiter {
  DeviceStatus* status;
  uint64_t timeout_ns;
  int block;
};

PYCOMM_HD void record_timeout(const Waiter& w, int peer, uint64_t epoch) {
  DeviceStatus* s = w.status;
  if (compare_and_swap(&s->code, uint32_t(DeviceError::kNone), uint32_t(DeviceError::kTimeout))) {
    s->peer = peer;
    s->block = w.block;
    s->epoch = epoch;
    store_release(&s->failed, uint32_t(1));  // publishes the three fields above
  }
}

// Checking the clock and the host-mapped status costs far more than a flag
// poll (the status is read across PCIe), so they are looked at every so often.
constexpr unsigned kPollsPerDeadlineCheck = 64;

// Waits until *flag >= target (acquire). False when that took longer than
// timeout_ns (recorded, naming `peer`) or another block of this rank failed first.
PYCOMM_HD bool wait_for_flag(const uint64_t* flag, uint64_t target, int peer, const Waiter& w) {
  uint64_t start = 0;
  for (unsigned polls = 0;; ++polls) {
    if (load_acquire(flag) >= target) return true;
    if (polls % kPollsPerDeadlineCheck == 0) {
      const uint64_t now = clock_ns();
      if (polls == 0) {
        start = now;
      } else if (now - start > w.timeout_ns) {
        record_timeout(w, peer, target);
        return false;
      }
      if (load_acquire(&w.status->failed) != 0) return false;
    }
    spin_pause(polls);
  }
}

// A barrier of block `block` across the ranks: announce `epoch` in every peer's
// pad (release: this rank's earlier writes are visible to whoever sees it),
// then wait for every peer's announcement in this rank's pad (acquire: the
// peers' earlier writes are visible here). Peers are waited for in rank
// order, so the first missing one is named.
PYCOMM_HD bool block_barrier(SignalPad* const* pads, int rank, int world, int block, uint64_t epoch,
                             const Waiter& w) {
  for (int p = 0; p < world; ++p) {
    if (p != rank) store_release(&pads[p]->barrier[block].from[rank], epoch);
  }
  for (int p = 0; p < world; ++p) {
    if (p != rank && !wait_for_flag(&pads[rank]->barrier[block].from[p], epoch, p, w)) return false;
  }
  return true;
}

}  // namespace pycomm::cuda
