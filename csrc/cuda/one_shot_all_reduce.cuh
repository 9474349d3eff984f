// One-shot all-reduce: every rank stages its input, and every rank reduces
// all ranks' staged inputs itself. One round of synchronisation, world times
// the reads of the two-shot: for latency-bound sizes.
//
// Block b takes share b of the elements and owns region b of every staging
// buffer (all_reduce_layout.h). Per piece of its share (as much as its region
// holds), block b of rank r:
//   1. copies the piece into its region of its own staging buffer;
//   2. barrier (epoch +1): block b of every rank has staged the piece;
//   3. reads the piece from every rank's region b and reduces it in rank order
//      0..world-1 into its output: the same order on every rank, so every
//      rank gets the same bits;
//   4. barrier (epoch +1): no rank still reads region b, so the next piece (or
//      launch) may overwrite it.
// The body is the same for a CUDA block and a host thread (block_lanes.h).
#pragma once

#include "all_reduce_args.h"
#include "all_reduce_elements.h"
#include "block_lanes.h"
#include "signal_protocol.h"

namespace pycomm::cuda {

// world == 1: the reduction of one input is the input.
template <class T>
PYCOMM_HD void copy_alone(const CudaAllReduceArgs& a, const Lanes& l) {
  const T* in = static_cast<const T*>(a.input);
  T* out = static_cast<T*>(a.output);
  if (in == out) return;
  const ElemRange mine = block_share(a.count, l.blocks, l.block, kVectorWidth<T>);
  // When input and output are misaligned alike, a head of fewer than a
  // vector's elements brings both onto 16 bytes and the rest of the share
  // goes as vectors; otherwise the head is empty, and the copy goes as
  // vectors only when both are aligned.
  const size_t head = common_head(out + mine.begin, in + mine.begin, mine.size());
  copy_elements(l, out + mine.begin, static_cast<T*>(nullptr), in + mine.begin, head, false);
  const bool vector = is_vector_aligned(out + mine.begin + head) && is_vector_aligned(in + mine.begin + head);
  // Then in passes of kMaxLoopElems (a multiple of the vector width: each stays aligned).
  for (size_t begin = mine.begin + head; begin < mine.end; begin += kMaxLoopElems) {
    copy_elements(l, out + begin, static_cast<T*>(nullptr), in + begin, min_size(mine.end - begin, kMaxLoopElems),
                  vector);
  }
}

// Region b of every rank's staging buffer, as block b of this rank addresses
// it (the one-shot and the two-shot give each block a fixed region). `a` must
// be the launch's own arguments (the kernel's parameter), not a copy.
template <class T>
PYCOMM_HD PeerRegions<T> staged_regions(const CudaAllReduceArgs& a, const Lanes& l, size_t region) {
  return PeerRegions<T>{a.peers.buffers, size_t(l.block) * region};
}

// Block b's barriers of one launch, in order: epochs epoch_base + 1, + 2, ...
// (epochs_used counts them), all bounded by the deadline the block took when
// it started (start_deadline). Thread 0 counts the epochs in its WaitState.
template <class Sync>
class LaunchBarriers {
 public:
  PYCOMM_HD LaunchBarriers(const CudaAllReduceArgs& a, const Lanes& l) : a_(a), l_(l) {
    if (l.thread == 0) Sync::wait_state().epoch = a.epoch_base;
  }
  // False when a peer did not arrive in time.
  PYCOMM_HD bool next() {
    // The Waiter is built here from the arguments, not kept as a member: a
    // copy held across the element loops took five registers for the
    // kernel's whole life, and at the 64-register cap the two-shot spilled
    // in its inner loops for them.
    return block_signal<Sync>(l_, [&] {
      const uint64_t epoch = ++Sync::wait_state().epoch;
      return block_barrier(a_.peers.pads, a_.rank, a_.world, l_.block, epoch, waiter_of<Sync>(a_, l_.block));
    });
  }

 private:
  const CudaAllReduceArgs& a_;
  const Lanes& l_;
};

// False when a peer did not arrive in time (a.status says which).
template <class T, class R, class Sync>
PYCOMM_HD bool one_shot_all_reduce(const CudaAllReduceArgs& a, const Lanes& l) {
  if (a.world == 1) {
    copy_alone<T>(a, l);
    return true;
  }
  start_deadline<Sync>(a, l);
  const T* in = static_cast<const T*>(a.input);
  T* out = static_cast<T*>(a.output);
  // Each loop pairs one tensor with the staging, which is always aligned.
  const bool in_vector = is_vector_aligned(in);
  const bool out_vector = is_vector_aligned(out);
  const size_t region = block_region_bytes(a.peers.buffer_bytes, l.blocks);
  const size_t piece = one_shot_piece_elems(region, sizeof(T));
  const ElemRange share = block_share(a.count, l.blocks, l.block, kVectorWidth<T>);
  const PeerRegions<T> staged = staged_regions<T>(a, l, region);
  T* const my_staged = const_cast<T*>(staged[a.rank]);
  LaunchBarriers<Sync> barriers(a, l);
  for (size_t begin = share.begin; begin < share.end; begin += piece) {
    const size_t n = min_size(share.end - begin, piece);
    copy_elements(l, my_staged, static_cast<T*>(nullptr), in + begin, n, in_vector);
    if (!barriers.next()) return false;
    reduce_sources<T, R>(l, out + begin, static_cast<T*>(nullptr), staged, a.world, n, a.world, out_vector);
    if (!barriers.next()) return false;
  }
  return true;
}

}  // namespace pycomm::cuda
