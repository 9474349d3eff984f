// Pipelined ring all-reduce for bandwidth-bound sizes, with core/ring_schedule.h's
// ownership: rank r owns chunk r. A "send" from rank r to rank r+1 is r
// writing a staging slot of its own and raising a flag in r+1's pad; r+1 then
// reads the slot straight from r's memory and raises a flag in r's pad to
// free it. Each rank only ever reads its left neighbour's slots.
//
// Block b of every rank runs its own ring over its share of each chunk
// (all_reduce_layout.h), cut into sub-chunks of a slot's size. Sub-chunk j runs
// its whole schedule before j+1 (2 (world-1) sends); sends cycle through
// kRingSlots slots, so a sender runs up to kRingSlots - 1 sends ahead of its
// receiver. For one sub-chunk rank r:
//   send 0:   its input of chunk r-1, widened to the accumulation type;
//   receive k = 0 .. world-3: the partial of chunk r-2-k; sends partial op input;
//   receive world-2: the partial of chunk r; partial op input, finished and
//             rounded, is r's output and is sent on (the all-gather starts);
//   receive world-1 .. 2 world-4: a finished chunk; output, and sent on;
//   receive 2 world-3: the last finished chunk (r+1); output only.
// Chunk c is combined in the order c+1, c+2, ..., c, and every other rank
// copies the owner's rounded bytes: every rank ends bitwise equal.
//
// Flags (peer_memory.h): the m-th send (from 0) of the launch publishes
// epoch_base + m + 1 in the right neighbour's ring_ready; having read the
// left neighbour's m-th send, a rank publishes epoch_base + m + 1 in the left
// neighbour's ring_consumed. Before filling a slot for send m a rank waits
// for its send m - kRingSlots to be consumed. The launch opens with a barrier
// among all ranks (epoch_base + 1), so a rank that never arrives is named by
// every rank, not only by its neighbours; and it ends when the right neighbour
// has consumed every send, so no rank reads this rank's staging buffer after
// its kernel ends.
#pragma once

#include "all_reduce_args.h"
#include "all_reduce_elements.h"
#include "block_lanes.h"
#include "one_shot_all_reduce.cuh"
#include "signal_protocol.h"

namespace pycomm::cuda {

template <class T, class R, class Sync>
PYCOMM_HD bool ring_all_reduce(const CudaAllReduceArgs& a, const Lanes& l) {
  using A = Accum<T>;
  if (a.world == 1) {
    copy_alone<T>(a, l);
    return true;
  }
  if (a.count == 0) return true;
  start_deadline<Sync>(a, l);
  const int n = a.world;
  const int rank = a.rank;
  const int left = ring_wrap(rank - 1, n);
  const int right = ring_wrap(rank + 1, n);
  const T* in = static_cast<const T*>(a.input);
  T* out = static_cast<T*>(a.output);
  // Each loop pairs the tensors it touches with the slots, always aligned.
  const bool in_vector = is_vector_aligned(in);
  const bool out_vector = is_vector_aligned(out);
  const size_t align = kVectorWidth<T>;
  const RingLayout layout = ring_layout(a.peers.buffer_bytes, l.blocks, sizeof(T), sizeof(A));
  const uint64_t base = a.epoch_base;
  SignalPad* const* pads = a.peers.pads;
  const int b = l.block;
  // Built at each wait from the arguments rather than held: a Waiter kept for
  // the kernel's life took registers the element loops needed.
  auto waiter = [&] { return waiter_of<Sync>(a, b); };

  if (!block_signal<Sync>(l, [&] { return block_barrier(pads, rank, n, b, base + 1, waiter()); })) return false;

  // Slot of send m in a rank's staging buffer.
  auto slot = [&](void* buffer, uint64_t m) {
    return static_cast<char*>(buffer) + ((m % kRingSlots) * size_t(l.blocks) + size_t(b)) * layout.slot_bytes;
  };
  auto my_slot = [&](uint64_t m) { return slot(a.peers.buffers[rank], m); };
  auto left_slot = [&](uint64_t m) { return slot(a.peers.buffers[left], m); };

  uint64_t sent = 0;      // sends this block has written
  uint64_t received = 0;  // left's sends this block has read
  // What the last data step owes the neighbours; paid by the next signal,
  // after the sync that orders the step's data accesses before it.
  bool owe_consumed = false;
  bool owe_ready = false;
  auto step_signal = [&](bool will_receive, bool will_send) {
    return block_signal<Sync>(l, [&] {
      if (owe_consumed) store_release(&pads[left]->ring_consumed[b].from[rank], base + received);
      if (owe_ready) store_release(&pads[right]->ring_ready[b].from[rank], base + sent);
      if (will_receive &&
          !wait_for_flag(&pads[rank]->ring_ready[b].from[left], base + received + 1, left, waiter()))
        return false;
      if (will_send && sent >= uint64_t(kRingSlots) &&
          !wait_for_flag(&pads[rank]->ring_consumed[b].from[right], base + sent + 1 - kRingSlots, right, waiter()))
        return false;
      return true;
    });
  };

  const size_t subchunks = ring_subchunks(a.count, n, l.blocks, b, align, layout.sub_elems);
  const int last = 2 * n - 3;  // the last receive of a sub-chunk
  for (size_t j = 0; j < subchunks; ++j) {
    auto range = [&](int chunk) {
      return ring_subchunk(ring_block_share(a.count, n, chunk, l.blocks, b, align), j, layout.sub_elems);
    };
    for (int k = -1; k <= last; ++k) {  // k = -1: the first send; k >= 0: receive k
      const bool receives = k >= 0;
      const bool sends = k < last;
      if (!step_signal(receives, sends)) return false;
      const A* partial_in = receives ? reinterpret_cast<const A*>(left_slot(received)) : nullptr;
      const T* final_in = receives ? reinterpret_cast<const T*>(left_slot(received)) : nullptr;
      A* partial_out = sends ? reinterpret_cast<A*>(my_slot(sent)) : nullptr;
      T* final_out = sends ? reinterpret_cast<T*>(my_slot(sent)) : nullptr;
      if (k < 0) {
        const ElemRange e = range(ring_rs_send_chunk(rank, 0, n));
        widen_elements<T>(l, partial_out, in + e.begin, e.size(), in_vector);
      } else if (k < n - 2) {
        const ElemRange e = range(ring_rs_recv_chunk(rank, k, n));
        combine_elements<T, R>(l, partial_out, partial_in, in + e.begin, e.size(), in_vector);
      } else if (k == n - 2) {
        const ElemRange e = range(rank);
        finish_elements<T, R>(l, out + e.begin, final_out, partial_in, in + e.begin, e.size(), n,
                              in_vector && out_vector);
      } else {
        const ElemRange e = range(ring_ag_recv_chunk(rank, k - (n - 1), n));
        copy_elements(l, out + e.begin, final_out, final_in, e.size(), out_vector);
      }
      owe_consumed = receives;
      owe_ready = sends;
      received += receives ? 1 : 0;
      sent += sends ? 1 : 0;
    }
  }
  // Pay the last step's debts, then wait until the right neighbour has read every send.
  return block_signal<Sync>(l, [&] {
    if (owe_consumed) store_release(&pads[left]->ring_consumed[b].from[rank], base + received);
    if (owe_ready) store_release(&pads[right]->ring_ready[b].from[rank], base + sent);
    return sent == 0 || wait_for_flag(&pads[rank]->ring_consumed[b].from[right], base + sent, right, waiter());
  });
}

}  // namespace pycomm::cuda
