// The pipelined ring over the shared-memory data path's links to rank+1: the
// reduce-scatter half, the all-gather half, or both in one pass (an
// all-reduce). The schedule (who sends which chunk when) is ring_schedule.h.
#pragma once

#include <cstddef>

#include "collectives.h"

namespace pycomm::core {

// Each opens with the handshake on `fp`, then runs its halves over `count`
// elements of the whole vector (world chunks: ring_schedule.h).

// Both halves, in place: `data` ends reduced over every rank (divided by
// `divisor` for avg). Each slice is saved to the context's backup before it is
// overwritten.
void ring_all_reduce(const Context& ctx, const Fingerprint& fp, DType dtype, ReduceOp op, int divisor,
                     char* data, size_t count);
// The reduce-scatter half: `input` holds every chunk; this rank's chunk,
// reduced, goes to `owned_output`.
void ring_reduce_scatter(const Context& ctx, const Fingerprint& fp, DType dtype, ReduceOp op, int divisor,
                         const char* input, size_t count, char* owned_output);
// The all-gather half: `owned_input` is this rank's chunk; every chunk goes
// to its offset in `output` (this rank's too).
void ring_all_gather(const Context& ctx, const Fingerprint& fp, DType dtype, char* output, size_t count,
                     const char* owned_input);

}  // namespace pycomm::core
