// What one rank of a host sees of all ranks' device memory for the CUDA
// all-reduce: every rank's staging buffer and signal pad (its own and its
// peers', mapped by CUDA IPC or, in one process, shared by pointer), and its
// own status record in host-mapped memory. Plain data, no CUDA headers: the
// CPU protocol test builds these in host memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "host_device.h"

namespace pycomm::cuda {

constexpr int kMaxRanks = 8;
constexpr int kMaxBlocks = 64;

// One block's flags, one slot per writing rank. A row is a cache line of its
// own (128 B: the GPU's L2 line), so blocks never share a line.
struct alignas(128) FlagRow {
  uint64_t from[kMaxRanks];
};

// A rank's signal pad: device memory, zeroed once when allocated, never reset.
// Every flag only ever increases (the epochs of successive launches increase),
// so a waiter compares with ">=" and a stale value from an earlier launch is
// always below what the current launch waits for.
struct SignalPad {
  // In rank p's pad, barrier[b].from[r] is written only by block b of rank r
  // (r != p): the epoch of the last barrier that block arrived at.
  FlagRow barrier[kMaxBlocks];
  // Ring only. In rank p's pad, ring_ready[b].from[r] is written only by block
  // b of rank r = p - 1: epoch_base + the number of ring sends of the current
  // launch whose data that block has finished writing into r's staging slots.
  FlagRow ring_ready[kMaxBlocks];
  // Ring only. In rank p's pad, ring_consumed[b].from[r] is written only by
  // block b of rank r = p + 1: epoch_base + the number of p's sends that block
  // has finished reading (so p may overwrite their slots).
  FlagRow ring_consumed[kMaxBlocks];
  // The claim on this rank's DeviceStatus record: 0 from set-up (zeroed with
  // the pad), set to 1 by the first block of this rank to time out, which then
  // alone writes the record. Touched only by this rank's own blocks, never by
  // a peer or the host, so a device-scope compare-and-swap on device memory
  // claims it (system_atomics.h): no host-device atomic on host-mapped memory.
  // Never reset: a timeout breaks the communicator for good (the host raises
  // and aborts, and never zeroes the DeviceStatus while this pad lives; a new
  // communicator comes with a new pad and record), so each pad is claimed at
  // most once. Its own cache line: the flags' polls never share it.
  alignas(128) uint32_t timeout_claim;
};

enum class DeviceError : uint32_t { kNone = 0, kTimeout = 1 };

// One per rank, in host-mapped pinned memory, zeroed by the host before the
// first launch. A non-zero code means the launch that set it failed: the
// communicator is broken and the host raises an error naming `peer`; it zeroes
// the record again only once the ranks have set up afresh.
// The record has one writer: the block that won the pad's timeout_claim
// (SignalPad) writes code, peer, block and epoch with plain stores, then
// `failed` with a system-scope release store. The host reads `failed` with
// acquire before the other fields (or reads them after the kernel ended).
struct DeviceStatus {
  uint32_t code;   // DeviceError
  int32_t peer;    // the rank whose flag did not arrive
  int32_t block;   // the block that waited for it
  // 0 until the record is complete, then 1 (release store). Every block of this
  // rank polls it while waiting so that all leave soon after the first fails;
  // the host may poll it while the kernel runs, and sets it (with code left
  // kNone) to ask the kernel to stop.
  uint32_t failed;
  uint64_t epoch;  // the flag value that was waited for
};

// Pointers valid on this rank's device, indexed by rank.
struct PeerMemory {
  void* buffers[kMaxRanks];   // staging buffers, 16-byte aligned, buffer_bytes each
  SignalPad* pads[kMaxRanks];
  size_t buffer_bytes;        // the same on every rank
};

// The same place in every rank's staging buffer: rank p's copy starts
// `offset_bytes` into buffers[p]. It keeps a pointer to the launch's
// PeerMemory and reads buffers[p] at each use rather than gathering the
// ranks' pointers into an array: on the GPU that PeerMemory lies in the
// kernel's parameter space (a __grid_constant__ argument), which a run-time
// rank index reads in place (ld.param, a constant-cache hit), while an array
// indexed at run time would live in local memory, a stack frame read in the
// reduction's innermost loop.
template <class T>
struct PeerRegions {
  void* const* buffers;  // PeerMemory::buffers of the launch's own arguments, not a copy of it
  size_t offset_bytes;
  PYCOMM_HD const T* operator[](int rank) const {
    return reinterpret_cast<const T*>(static_cast<const char*>(buffers[rank]) + offset_bytes);
  }
  // The same regions, `elems` elements further in.
  PYCOMM_HD PeerRegions advanced(size_t elems) const { return {buffers, offset_bytes + elems * sizeof(T)}; }
};

}  // namespace pycomm::cuda
