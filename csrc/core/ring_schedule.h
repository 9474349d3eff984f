// The ring all-reduce schedule: which chunk moves where at which step. Pure
// arithmetic with no transport, so it is shared by every transport and tested
// natively (tests/test_ring_schedule.cpp).
//
// A tensor of `count` elements is cut into `world` chunks of nearly equal size.
// Reduce-scatter: at step s (0 <= s < world-1) rank r sends its partial of chunk
// (r - s) to rank r+1 and receives chunk (r - s - 1) from rank r-1; after
// world-1 steps rank r holds chunk (r + 1) fully reduced. All-gather: at step s
// rank r forwards chunk (r + 1 - s) and receives chunk (r - s). Each chunk is
// further cut into sub-chunks that are pipelined through the transport's
// buffers; sub-chunk j of every chunk runs the whole ring before j+1.
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
inline Range chunk_range(size_t count, int nchunks, int c) {
  const size_t base = count / size_t(nchunks);
  const size_t rem = count % size_t(nchunks);
  const size_t uc = size_t(c);
  const size_t begin = uc * base + (uc < rem ? uc : rem);
  return Range{begin, begin + base + (uc < rem ? 1 : 0)};
}

inline int rs_send_chunk(int rank, int step, int world) { return wrap_rank(long(rank) - step, world); }
inline int rs_recv_chunk(int rank, int step, int world) {
  return wrap_rank(long(rank) - step - 1, world);
}
inline int owned_chunk(int rank, int world) { return wrap_rank(long(rank) + 1, world); }
inline int ag_send_chunk(int rank, int step, int world) {
  return wrap_rank(long(rank) + 1 - step, world);
}
inline int ag_recv_chunk(int rank, int step, int world) { return wrap_rank(long(rank) - step, world); }

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

// What a rank does with one sub-chunk, in order. Every action but the first
// starts by receiving from rank-1; every action but the last ends by sending to
// rank+1: 2*world - 1 actions, 2*(world-1) messages each way.
enum class RingAction {
  kSendLocal,         // widen the local slice and send it
  kReduceSend,        // partial (op) local -> send
  kReduceFinish,      // partial (op) local, finished -> output and send
  kCopyForward,       // reduced slice -> output and send
  kCopyLast,          // reduced slice -> output
};

struct RingStep {
  RingAction action;
  int chunk;
};

inline std::vector<RingStep> ring_steps(int rank, int world) {
  std::vector<RingStep> steps;
  if (world < 2) return steps;
  steps.push_back({RingAction::kSendLocal, rs_send_chunk(rank, 0, world)});
  for (int s = 1; s < world - 1; ++s) steps.push_back({RingAction::kReduceSend, rs_send_chunk(rank, s, world)});
  steps.push_back({RingAction::kReduceFinish, owned_chunk(rank, world)});
  for (int s = 1; s < world - 1; ++s) steps.push_back({RingAction::kCopyForward, ag_recv_chunk(rank, s - 1, world)});
  steps.push_back({RingAction::kCopyLast, ag_recv_chunk(rank, world - 2, world)});
  return steps;
}

}  // namespace pycomm::core
