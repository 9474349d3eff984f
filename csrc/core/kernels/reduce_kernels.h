// Element-wise reduction loops used by every all-reduce algorithm, torch-free.
//
// All entry points take untyped pointers plus (DType, ReduceOp); the switch over
// both lives in reduce_kernels.cpp alone. float16 and bfloat16 are widened to
// float32, combined there, and rounded once at the end. Every rank that computes
// a value combines its inputs in the same order, which keeps results bitwise
// identical across ranks.
#pragma once

#include <cstddef>

#include "../dtypes.h"

namespace pycomm::core {

// out[i] = finish(srcs[0][i] (op) srcs[1][i] (op) ... srcs[nsrc-1][i]), combined
// left to right. `divisor` is used by kAvg only. `out` may be one of the
// sources (the same pointer: a single-copy reduction into a rank's own
// tensor), but must not overlap one otherwise.
void reduce_sources(DType dtype, ReduceOp op, void* out, const void* const* srcs, int nsrc,
                    size_t n, int divisor);

// Ring steps. Partials travel in the accumulation type (float32 for half types).
// first:  acc_out = widen(local)
void ring_first(DType dtype, const void* local, void* acc_out, size_t n);
// middle: acc_out = partial (op) widen(local)
void ring_middle(DType dtype, ReduceOp op, const void* partial, const void* local, void* acc_out,
                 size_t n);
// last:   out = out2 = finish(partial (op) widen(local)); out2 may be null.
void ring_last(DType dtype, ReduceOp op, const void* partial, const void* local, void* out,
               void* out2, size_t n, int divisor);

// The vector loops this build's kernels use (float_lanes.h): "avx2+f16c",
// "neon", or "none (scalar loops)".
const char* cpu_vector_path();

// Copy n bytes with streaming stores (past the caches) where the build has
// them: for a copy larger than the caches whose destination is not read back
// soon (backups), it costs no read of the destination's old lines and evicts
// nothing the collective needs.
void copy_streaming(void* dst, const void* src, size_t n);

}  // namespace pycomm::core
