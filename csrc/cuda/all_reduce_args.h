// The arguments of one CUDA all-reduce launch and the host-side rules around
// them: validation, defaults, and how far a launch advances the epoch. Plain
// C++ with no CUDA headers, so the CPU protocol test uses it as the launcher
// does. The public entry point is cuda_all_reduce.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../core/collective.h"
#include "../core/dtypes.h"
#include "all_reduce_layout.h"
#include "peer_memory.h"

namespace pycomm::cuda {

// Every field but rank, peers (each rank's own mapping of the same memory),
// input, output and status must be equal on all ranks (the glue checks that
// with the session's fingerprint before launching).
struct CudaAllReduceArgs {
  int rank;
  int world;             // 1 .. kMaxRanks
  PeerMemory peers;      // this rank's view of every rank's staging buffer and pad
  const void* input;     // count elements of dtype on this rank's device
  void* output;          // may equal input (in place); must not overlap it otherwise
  size_t count;
  core::DType dtype;
  core::ReduceOp op;     // avg divides the sum by world, once, in the accumulation type
  core::Algorithm algorithm;  // direct (one shot), two_shot or ring (collective.h)
  uint64_t epoch_base;   // advance by epochs_used(args) after each launch (signal_protocol.h)
  uint64_t timeout_ns;   // bound of the launch: a block's waits fail once this long has passed since it started
  DeviceStatus* status;  // this rank's, host-mapped; device pointer
  int blocks;            // 1 .. max_blocks_per_rank(world, sm_count); 0: the default (blocks_of)
  // The SMs of the GPU the ranks may share (cudaDevAttrMultiProcessorCount;
  // the fewest among the ranks' GPUs, so that it is the same on every rank);
  // 0: unknown, no limit but kMaxBlocks.
  int sm_count;
};

constexpr unsigned kAllReduceThreads = 512;
// The kernels' launch bounds keep them within 64 registers a thread, so that
// this many blocks of kAllReduceThreads fit on an SM.
constexpr int kMinBlocksPerSM = 2;

// One block per 64 KiB, 1 .. 32 (untuned).
inline int default_blocks(core::Algorithm, size_t bytes) {
  const size_t b = ceil_div(bytes, size_t(64) << 10);
  return b < 1 ? 1 : (b > 32 ? 32 : int(b));
}

// The most blocks a rank may launch so that every rank's blocks can be
// resident on the GPU at once. A block spins on its peers' flags: when ranks
// share a GPU (threads of one process with a stream each, or processes under
// MPS) and the spinning blocks of some ranks fill the SMs, a peer's block
// waiting to be scheduled runs only once they give up, at their timeout. The
// sum over ranks is kept within the SM count: one block an SM, half of what
// the launch bounds fit (kMinBlocksPerSM), leaving the other half to what
// runs beside them (the training's kernels, other MPS clients). A margin, not
// a guarantee: kernels that fill every SM can delay the ranks' blocks, though
// not for ever, since those kernels end. Every rank is assumed to share one
// GPU (the worst case), so ranks on GPUs of their own are held to the same
// count. At least one block a rank; sm_count 0 (unknown): kMaxBlocks.
inline int max_blocks_per_rank(int world, int sm_count) {
  if (sm_count <= 0 || world < 1) return kMaxBlocks;
  const int fit = sm_count / world;
  return fit < 1 ? 1 : (fit > kMaxBlocks ? kMaxBlocks : fit);
}

// The blocks a launch really uses: a.blocks, or the default for its size
// within max_blocks_per_rank. epochs_used, check_args and the launcher all
// take it from here, so they agree, and it is the same on every rank.
inline int blocks_of(const CudaAllReduceArgs& a) {
  if (a.blocks > 0) return a.blocks;
  const int by_size = default_blocks(a.algorithm, a.count * core::dtype_size(a.dtype));
  const int most = max_blocks_per_rank(a.world, a.sm_count);
  return by_size < most ? by_size : most;
}

inline size_t signal_pad_bytes() { return sizeof(SignalPad); }

// How far the launch advances the epoch: the largest flag value it writes is
// epoch_base + epochs_used(args). The same on every rank.
inline uint64_t epochs_used(const CudaAllReduceArgs& a) {
  if (a.count == 0 || a.world == 1) return 0;
  const size_t elem = core::dtype_size(a.dtype);
  const size_t bytes = a.peers.buffer_bytes;
  const int blocks = blocks_of(a);
  // Block 0's share is the largest: it runs the most pieces.
  const size_t share = block_share(a.count, blocks, 0, vector_elems(elem)).size();
  const size_t region = block_region_bytes(bytes, blocks);
  switch (a.algorithm) {
    case core::Algorithm::kDirect:  // a barrier after staging and after reading, per piece
      return 2 * ceil_div(share, one_shot_piece_elems(region, elem));
    case core::Algorithm::kTwoShot:  // a barrier after staging and after reducing, per piece, and one at the end
      return 2 * ceil_div(share, two_shot_layout(region, elem, a.world).piece_elems) + 1;
    case core::Algorithm::kRing: {  // the entry barrier (1), and a flag value per send of the busiest block
      const size_t sub = ring_layout(bytes, blocks, elem, core::accum_size(a.dtype)).sub_elems;
      uint64_t most = 1;
      for (int b = 0; b < blocks; ++b) {
        const uint64_t sends = ring_subchunks(a.count, a.world, blocks, b, vector_elems(elem), sub) *
                               ring_sends_per_subchunk(a.world);
        most = sends > most ? sends : most;
      }
      return most;
    }
    default: return 0;  // check_args refuses it
  }
}

// Null when the launch is valid, else what is wrong with it.
inline const char* check_args(const CudaAllReduceArgs& a) {
  if (a.world < 1 || a.world > kMaxRanks) return "world must be 1..8";
  if (a.rank < 0 || a.rank >= a.world) return "rank must be in [0, world)";
  if (a.sm_count < 0) return "sm_count must be >= 0 (0: unknown)";
  const int blocks = blocks_of(a);
  if (blocks < 1 || blocks > kMaxBlocks) return "blocks must be 1..64 (0: default)";
  // Rejected rather than clamped: the caller asked for this many.
  if (blocks > max_blocks_per_rank(a.world, a.sm_count))
    return "blocks x world exceeds sm_count: every rank's blocks must be resident on the GPU at once "
           "(at most max_blocks_per_rank(world, sm_count) a rank; 0 picks a count that fits)";
  const size_t elem = core::dtype_size(a.dtype);
  if (elem == 0) return "unsupported dtype";
  if (uint32_t(a.op) < uint32_t(core::ReduceOp::kSum) || uint32_t(a.op) > uint32_t(core::ReduceOp::kProduct))
    return "unknown reduction operator";
  if (a.op == core::ReduceOp::kAvg && !core::is_floating(a.dtype))
    return "avg is not defined for integer tensors";
  if (a.algorithm != core::Algorithm::kDirect && a.algorithm != core::Algorithm::kTwoShot &&
      a.algorithm != core::Algorithm::kRing)
    return "unknown algorithm";
  if (a.count == 0) return nullptr;
  if (a.input == nullptr || a.output == nullptr) return "input and output must not be null";
  // Tensors off 16 bytes are served (their loops go element by element,
  // all_reduce_elements.h), but a GPU faults on an element off its own size.
  if (reinterpret_cast<uintptr_t>(a.input) % elem != 0 || reinterpret_cast<uintptr_t>(a.output) % elem != 0)
    return "input and output must be aligned to their element size";
  if (a.status == nullptr) return "status must not be null";
  if (a.world == 1) return nullptr;
  if (a.timeout_ns == 0) return "timeout_ns must be positive";
  for (int r = 0; r < a.world; ++r) {
    if (a.peers.buffers[r] == nullptr || a.peers.pads[r] == nullptr) return "every rank needs a buffer and a pad";
    if (reinterpret_cast<uintptr_t>(a.peers.buffers[r]) % kVectorBytes != 0) return "staging buffers must be 16-byte aligned";
  }
  const size_t bytes = a.peers.buffer_bytes;
  const size_t region = block_region_bytes(bytes, blocks);
  switch (a.algorithm) {
    case core::Algorithm::kDirect:
      if (one_shot_piece_elems(region, elem) == 0) return "staging buffer too small for this block count";
      break;
    case core::Algorithm::kTwoShot:
      if (two_shot_layout(region, elem, a.world).piece_elems == 0) return "staging buffer too small for this block count";
      break;
    case core::Algorithm::kRing:
      if (ring_layout(bytes, blocks, elem, core::accum_size(a.dtype)).sub_elems == 0)
        return "staging buffer too small for the ring's slots at this block count";
      break;
    default: break;  // refused above
  }
  return nullptr;
}

}  // namespace pycomm::cuda
