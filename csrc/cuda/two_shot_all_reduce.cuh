// Two-shot all-reduce: a reduce-scatter then an all-gather, both by direct
// reads of the peers' staging buffers. Each rank reads about 2 (world-1)/world
// of the data, as a ring does, in two rounds instead of 2 (world-1) steps.
//
// Block b takes share b of the elements and owns region b of every staging
// buffer (all_reduce_layout.h), which holds a piece of its share and, after
// it, a result area. Rank r owns chunk r of each piece (core/ring_schedule.h's
// ownership). Per piece, block b of rank r:
//   1. copies the piece into the input area of its region;
//   2. barrier (epoch +1): block b of every rank has staged the piece;
//   3. reduce-scatter: reduces chunk r of the piece from every rank's region b
//      in rank order 0..world-1, into its output and its result area;
//   4. barrier (epoch +1): block b of every rank has its result;
//   5. all-gather: copies every other chunk c from rank c's result area into
//      its output (the owner's bytes: every rank ends bitwise equal).
// After the last piece, a barrier (epoch +1): no rank still reads this rank's
// staging buffer when the kernel ends. Between pieces none is needed: a peer
// reads this rank's input area only in step 3, before it arrives at step 4,
// which this rank passed before the next piece's step 1 overwrites it; and it
// reads the result area only in step 5, before it arrives at the next piece's
// step 2, which this rank passes before its next step 3 overwrites it.
#pragma once

#include "all_reduce_args.h"
#include "all_reduce_elements.h"
#include "block_lanes.h"
#include "one_shot_all_reduce.cuh"
#include "signal_protocol.h"

namespace pycomm::cuda {

template <class T, class R, class Sync>
PYCOMM_HD bool two_shot_all_reduce(const CudaAllReduceArgs& a, const Lanes& l) {
  if (a.world == 1) {
    copy_alone<T>(a, l);
    return true;
  }
  if (a.count == 0) return true;
  start_deadline<Sync>(a, l);
  const T* in = static_cast<const T*>(a.input);
  T* out = static_cast<T*>(a.output);
  // Each loop pairs one tensor with the staging, which is always aligned.
  const bool in_vector = is_vector_aligned(in);
  const bool out_vector = is_vector_aligned(out);
  const size_t align = kVectorWidth<T>;
  const size_t region = block_region_bytes(a.peers.buffer_bytes, l.blocks);
  const TwoShotLayout layout = two_shot_layout(region, sizeof(T), a.world);
  const ElemRange share = block_share(a.count, l.blocks, l.block, align);
  const PeerRegions<T> staged = staged_regions<T>(a, l, region);
  T* const my_staged = const_cast<T*>(staged[a.rank]);
  LaunchBarriers<Sync> barriers(a, l);
  for (size_t begin = share.begin; begin < share.end; begin += layout.piece_elems) {
    const ElemRange piece{begin, min_size(share.end, begin + layout.piece_elems)};
    copy_elements(l, my_staged, static_cast<T*>(nullptr), in + piece.begin, piece.size(), in_vector);
    if (!barriers.next()) return false;
    const ElemRange mine = split_aligned(piece, a.world, a.rank, align);
    reduce_sources<T, R>(l, out + mine.begin, my_staged + layout.result_offset,
                         staged.advanced(mine.begin - piece.begin), a.world, mine.size(), a.world, out_vector);
    if (!barriers.next()) return false;
    for (int c = 0; c < a.world; ++c) {
      if (c == a.rank) continue;
      const ElemRange chunk = split_aligned(piece, a.world, c, align);
      copy_elements(l, out + chunk.begin, static_cast<T*>(nullptr), staged[c] + layout.result_offset, chunk.size(),
                    out_vector);
    }
  }
  return barriers.next();
}

}  // namespace pycomm::cuda
