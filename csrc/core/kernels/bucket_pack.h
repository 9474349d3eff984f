// Gradient bucketing on the CPU, torch-free: packing a list of tensors into one
// flat bucket and scattering the bucket back, with a scale (e.g. 1/world_size)
// and a dtype cast fused into the single pass over the bytes.
//
// Packing and unpacking are the same loop with the roles of source and
// destination swapped, so the core only knows "slices": runs of contiguous
// elements to convert. The glue turns (tensors, bucket, offsets) into slices.
//
// Arithmetic, identical on the CPU and in the CUDA kernel (bucket_kernels.cuh):
//   compute type C = float64 if either side is float64, else float32
//   dst[j] = round_to_dst(C(src[j]) * C(scale))     (the multiply is skipped when scale == 1)
// Widening to C is exact; the multiply rounds once in C; the narrowing rounds
// to nearest even. A float64 value bound for bfloat16 goes through float32
// first, as torch's `.to()` does; one bound for float16 too on x86 and in the
// CUDA kernel, while on aarch64 it rounds once, as torch's `.to()` does there
// (half_convert.h). The result equals torch's `(src.to(C) * scale).to(dst_dtype)`
// bit for bit (NaN payloads aside) on each.
#pragma once

#include <cstddef>

#include "../dtypes.h"

namespace pycomm::core {

// dst[j] = convert(src[j]) for j < numel. A slice's src and dst must not overlap.
struct BucketSlice {
  const void* src;
  void* dst;
  size_t numel;
};

// The dtypes a bucket and its tensors may have: float32, float64, float16, bfloat16.
bool bucket_dtype_supported(DType t);

// Converts every slice from src_dtype to dst_dtype with `scale` fused in, in
// list order, on the calling thread (one thread per rank: no pool).
// Throws InvalidArgument for an unsupported dtype.
void copy_slices(DType src_dtype, DType dst_dtype, const BucketSlice* slices, size_t count,
                 double scale);

}  // namespace pycomm::core
