// The pipelined ring over the shared-memory data path's links to rank+1: the
// reduce-scatter half, the all-gather half, or both in one pass (an
// all-reduce). The schedule (who sends which chunk when) is ring_schedule.h.
#pragma once

#include <cstddef>

#include "collectives.h"

namespace pycomm::core {

struct RingJob {
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int divisor = 1;
  size_t count = 0;  // elements of the whole vector: world chunks (ring_schedule.h)
  bool reduce_scatter = false;
  bool all_gather = false;
  // reduce-scatter: every chunk's input, at its offset in the vector.
  const char* input = nullptr;
  // all-gather: every chunk's output, at its offset in the vector. With both
  // halves and output == input the ring runs in place (an all-reduce), and
  // each slice is saved to the context's backup before it is overwritten.
  char* output = nullptr;
  // reduce-scatter alone: where this rank's finished chunk goes.
  char* owned_output = nullptr;
  // all-gather alone: this rank's own chunk (copied into output too).
  const char* owned_input = nullptr;
};

void run_ring(const Context& ctx, const RingJob& job);

}  // namespace pycomm::core
