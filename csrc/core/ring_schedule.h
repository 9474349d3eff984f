// The ring schedule: which chunk moves where at which step. Pure arithmetic
// with no transport, shared by every transport and tested natively
// (tests/test_ring_schedule.cpp).
//
// A vector of `count` elements is cut into `world` chunks of nearly equal size.
// Ownership is stated, not implied: after the reduce-scatter half, rank r holds
// chunk r fully reduced. That is what reduce_scatter_tensor needs, and what an
// all-gather half (alone or after the reduce-scatter) starts from.
//
//   reduce-scatter, step s = 0 .. world-2: rank r sends its partial of chunk
//     r-1-s to rank r+1; at the step after, it receives chunk r-2-s from rank
//     r-1 and folds its own input in. The last receive is chunk r: finished.
//   all-gather, step s = 0 .. world-2: rank r sends chunk r-s (its own first,
//     then what it received) to rank r+1 and receives chunk r-1-s from rank r-1.
//
// Chunk c is therefore reduced in the order c+1, c+2, ..., c (each rank folds
// its input into the partial it received), the same order whichever rank asks,
// and the all-gather copies the result verbatim: every rank ends bitwise equal.
//
// Each chunk is cut further into sub-chunks pipelined through a link's
// buffers; sub-chunk j of every chunk runs its whole schedule before j+1.
#pragma once

#include <cstddef>
#include <vector>

namespace pycomm::core {

struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

inline int wrap_rank(long r, int world) { return int(((r % world) + world) % world); }

// Chunk c of `count` elements split into `nchunks`: the first count % nchunks
// chunks hold one element more. Any count works, including 0 and count < nchunks.
// When count is a multiple of nchunks (reduce_scatter_tensor, all_gather_into_
// tensor) every chunk is exactly count / nchunks long.
inline Range chunk_range(size_t count, int nchunks, int c) {
  const size_t base = count / size_t(nchunks);
  const size_t rem = count % size_t(nchunks);
  const size_t uc = size_t(c);
  const size_t begin = uc * base + (uc < rem ? uc : rem);
  return Range{begin, begin + base + (uc < rem ? 1 : 0)};
}

inline int owned_chunk(int rank, int /*world*/) { return rank; }
inline int rs_send_chunk(int rank, int step, int world) { return wrap_rank(long(rank) - 1 - step, world); }
inline int rs_recv_chunk(int rank, int step, int world) { return wrap_rank(long(rank) - 2 - step, world); }
inline int ag_send_chunk(int rank, int step, int world) { return wrap_rank(long(rank) - step, world); }
inline int ag_recv_chunk(int rank, int step, int world) { return wrap_rank(long(rank) - 1 - step, world); }

// Sub-chunks per chunk when one message carries at most `sub_elems` elements.
// Every chunk uses the same number (the largest chunk's), so both ends of a link
// agree on the message count; a shorter chunk's last sub-chunk may be empty.
inline size_t num_subchunks(size_t count, int world, size_t sub_elems) {
  const size_t largest = chunk_range(count, world, 0).size();
  return largest == 0 ? 0 : (largest + sub_elems - 1) / sub_elems;
}

inline Range subchunk_range(size_t count, int world, int chunk, size_t j, size_t sub_elems) {
  const Range c = chunk_range(count, world, chunk);
  size_t begin = c.begin + j * sub_elems;
  size_t end = begin + sub_elems;
  if (begin > c.end) begin = c.end;
  if (end > c.end) end = c.end;
  return Range{begin, end};
}

// What a rank does with one sub-chunk, in order. Every action but a first
// kSend* receives from rank-1 first; every action but kFinishLast / kCopyLast
// ends by sending to rank+1.
enum class RingAction {
  kSendLocal,      // reduce-scatter start: widen the local slice and send it
  kReduceSend,     // partial (op) local -> send
  kFinish,         // partial (op) local, finished -> owned output, and send (all-gather follows)
  kFinishLast,     // partial (op) local, finished -> owned output (reduce-scatter alone)
  kSendOwned,      // all-gather start (alone): own slice -> output and send
  kCopyForward,    // received slice -> output, and send
  kCopyLast,       // received slice -> output
};

struct RingStep {
  RingAction action;
  int chunk;
};

// The actions of one rank for one sub-chunk: the reduce-scatter half, the
// all-gather half, or both (an all-reduce: the finished chunk is sent on at
// once, so the halves share one pass over the data).
inline std::vector<RingStep> ring_steps(int rank, int world, bool reduce_scatter, bool all_gather) {
  std::vector<RingStep> steps;
  if (world < 2) return steps;
  if (reduce_scatter) {
    steps.push_back({RingAction::kSendLocal, rs_send_chunk(rank, 0, world)});
    for (int s = 1; s < world - 1; ++s) steps.push_back({RingAction::kReduceSend, rs_send_chunk(rank, s, world)});
    steps.push_back({all_gather ? RingAction::kFinish : RingAction::kFinishLast, owned_chunk(rank, world)});
  } else if (all_gather) {
    steps.push_back({RingAction::kSendOwned, owned_chunk(rank, world)});
  }
  if (all_gather) {
    for (int s = 0; s < world - 2; ++s) steps.push_back({RingAction::kCopyForward, ag_recv_chunk(rank, s, world)});
    steps.push_back({RingAction::kCopyLast, ag_recv_chunk(rank, world - 2, world)});
  }
  return steps;
}

}  // namespace pycomm::core
