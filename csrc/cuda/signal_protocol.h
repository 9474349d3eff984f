// The flag and epoch protocol of the CUDA all-reduce kernels, in code that
// runs on the GPU and on host threads alike (see host_device.h).
//
// Epochs. Each launch gets `epoch_base` from the host and uses the values
// epoch_base + 1 .. epoch_base + epochs_used(args) (all_reduce_args.h) for its
// flags; the host then advances its base by epochs_used(args), the same on
// every rank because every rank launches the same sequence of collectives.
// Bases start at 0 on zeroed pads, so flags only ever increase.
//
// Deadlines. Every wait is bounded, by the collective's deadline: each block
// reads the device clock (%globaltimer) once, when it starts its part of the
// launch, and every wait of that block fails once the clock has passed that
// start + timeout_ns (the whole launch, not each wait, gets timeout_ns; a block
// scheduled late starts its count late). A wait that fails on the clock claims
// the rank's DeviceStatus record (once per rank: the pad's timeout_claim),
// writes the missing peer into it and makes its block leave the kernel; the
// other blocks of the rank see the status's `failed` flag in their own waits
// and leave too.
//
// Only one thread of a block (thread 0) calls these; block_signal()
// (block_lanes.h) orders the other threads' data accesses around it.
#pragma once

#include <cstdint>

#include "all_reduce_args.h"
#include "block_lanes.h"
#include "host_device.h"
#include "peer_memory.h"
#include "system_atomics.h"

namespace pycomm::cuda {

// What a waiting block needs to bound and report its wait.
struct Waiter {
  DeviceStatus* status;  // this rank's, host-mapped
  uint32_t* claim;       // this rank's own pad's timeout_claim (device memory)
  uint64_t deadline_ns;  // clock_ns() past which every wait of this block fails
  int block;
};

// The deadline of block l.block's part of launch `a`, taken when the block
// starts it: on the device clock (the host's is another), by thread 0, which
// alone waits, into the block's WaitState (block_lanes.h).
template <class Sync>
PYCOMM_HD void start_deadline(const CudaAllReduceArgs& a, const Lanes& l) {
  if (l.thread == 0) Sync::wait_state().deadline = deadline_after(a.timeout_ns);
}

// Thread 0's Waiter for block `block` of launch `a`, with the deadline that
// start_deadline took.
template <class Sync>
PYCOMM_HD Waiter waiter_of(const CudaAllReduceArgs& a, int block) {
  return Waiter{a.status, &a.peers.pads[a.rank]->timeout_claim, Sync::wait_state().deadline, block};
}

// Writes the record of a timeout waiting for `peer`'s flag `epoch`, when this
// is the rank's first (true); a later timeout, of this block or another,
// leaves the first record alone. The claim is a device-scope compare-and-swap
// on the rank's own pad, and the record then has a single writer: its plain
// stores need no atomics on host-mapped memory, and the release store of
// `failed` publishes them to the host, which reads `failed` with acquire first.
PYCOMM_HD bool record_timeout(const Waiter& w, int peer, uint64_t epoch) {
  if (!compare_and_swap_device(w.claim, uint32_t(0), uint32_t(1))) return false;
  DeviceStatus* s = w.status;
  s->peer = peer;
  s->block = w.block;
  s->epoch = epoch;
  s->code = uint32_t(DeviceError::kTimeout);
  store_release(&s->failed, uint32_t(1));  // publishes the four fields above
  return true;
}

// Checking the clock and the host-mapped status costs far more than a flag
// poll (the status is read across PCIe), so they are looked at every so
// often, and not at all by a wait that ends within that many polls.
constexpr unsigned kPollsPerDeadlineCheck = 64;

// Waits until *flag >= target (acquire). False when the block's deadline
// passed first (recorded, naming `peer`) or another block of this rank, or
// the host, set the status's `failed`.
//
// The polls are relaxed loads: a poll that fails orders nothing, and an
// acquire on the GPU (ld.acquire.sys) invalidates the SM's L1 each time. Once
// a poll sees the target, one acquire load of the same flag orders the
// block's later accesses after the writes the peer published with it: it
// reads that value or a later one (a flag has one writer and only
// increases), whose release store comes after the first in that writer's
// order. `failed` is polled relaxed too: a block that sees it only leaves.
PYCOMM_HD bool wait_for_flag(const uint64_t* flag, uint64_t target, int peer, const Waiter& w) {
  for (unsigned polls = 1;; ++polls) {
    if (load_relaxed(flag) >= target) {
      (void)load_acquire(flag);
      return true;
    }
    if (polls % kPollsPerDeadlineCheck == 0) {
      if (clock_ns() > w.deadline_ns) {
        record_timeout(w, peer, target);
        return false;
      }
      if (load_relaxed(&w.status->failed) != 0) return false;
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
  PYCOMM_NO_UNROLL
  for (int p = 0; p < world; ++p) {
    if (p != rank) store_release(&pads[p]->barrier[block].from[rank], epoch);
  }
  PYCOMM_NO_UNROLL
  for (int p = 0; p < world; ++p) {
    if (p != rank && !wait_for_flag(&pads[rank]->barrier[block].from[p], epoch, p, w)) return false;
  }
  return true;
}

}  // namespace pycomm::cuda
