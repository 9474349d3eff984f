// The gradient-bucketing kernel for CUDA, torch-free: packs a list of tensors
// into one flat bucket, or scatters the bucket back, with a scale and a dtype
// cast fused in, in ONE launch for the whole list (in the spirit of apex's
// multi_tensor_apply).
//
// As in the CPU core (csrc/core/bucket_pack.h), packing and unpacking are both
// "convert these slices": a table of (src, dst, numel) runs. Every slice is cut
// into chunks of kBucketChunk elements; block b converts chunk b (then
// b + gridDim.x, ...), finding its slice by binary search over the table's
// prefix sums. Short tables travel in the kernel's parameters; long ones are
// copied to device memory by the caller.
//
// Arithmetic is the CPU core's: compute in float64 if either side is float64,
// else float32; scale multiplied once (skipped when 1); round to nearest even;
// float64 -> float16/bfloat16 goes through float32 as torch's .to() does.
//
// The host part below (layout structs, planner, launcher declaration) is also
// included by the C++ glue, which g++ compiles; the device code is nvcc's only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../core/dtypes.h"

namespace pycomm::cuda {

// One contiguous run of elements: dst[j] = convert(src[j]) for j < numel.
struct BucketSliceDesc {
  const void* src;
  void* dst;
  int64_t numel;
  // Index of this slice's first chunk in the launch (prefix sum of chunk counts).
  int64_t first_chunk;
};

// A block's work item. A multiple of every vector width (2, 4 or 8 elements),
// so each chunk starts as aligned as its slice does.
constexpr int64_t kBucketChunk = 8192;
constexpr int kBucketThreads = 256;
// Tables up to this long ride in the kernel parameters (32 B each; the
// parameter space is 4 KB), which spares the host-to-device copy.
constexpr int64_t kBucketInlineSlices = 96;

// Fills first_chunk for each slice; returns the launch's chunk count.
inline int64_t plan_bucket_chunks(BucketSliceDesc* slices, int64_t count) {
  int64_t chunks = 0;
  for (int64_t i = 0; i < count; ++i) {
    slices[i].first_chunk = chunks;
    chunks += (slices[i].numel + kBucketChunk - 1) / kBucketChunk;
  }
  return chunks;
}

}  // namespace pycomm::cuda

// Converts every slice from src_dtype to dst_dtype with `scale` fused in, in one
// launch on `stream`. `slices` holds `count` planned entries (plan_bucket_chunks),
// in host memory when table_on_device is false (then count <= kBucketInlineSlices),
// else in device memory that stays valid until the kernel has run. Returns the
// launch status; cudaErrorInvalidValue for an unsupported dtype or a table too
// long to pass inline.
extern "C" cudaError_t pycomm_cuda_convert_slices(pycomm::core::DType src_dtype,
                                                  pycomm::core::DType dst_dtype,
                                                  const pycomm::cuda::BucketSliceDesc* slices,
                                                  int64_t count, bool table_on_device,
                                                  int64_t total_chunks, double scale,
                                                  cudaStream_t stream);

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace pycomm::cuda {

struct BucketLaunch {
  const BucketSliceDesc* table;  // device table, or null: use inline_table
  int64_t count;
  int64_t total_chunks;
  double scale;
  BucketSliceDesc inline_table[kBucketInlineSlices];
};

template <class S, class D>
using BucketCompute =
    std::conditional_t<std::is_same_v<S, double> || std::is_same_v<D, double>, double, float>;

template <class C, class S>
__device__ __forceinline__ C bucket_widen(S x) {
  if constexpr (std::is_same_v<S, __half>) {
    return C(__half2float(x));
  } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return C(__bfloat162float(x));
  } else {
    return C(x);
  }
}

// double -> half types through float, as c10::Half(double) does.
template <class D, class C>
__device__ __forceinline__ D bucket_narrow(C v) {
  if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(float(v));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(float(v));
  } else {
    return D(v);
  }
}

template <class S, class D, bool kScaled>
__device__ __forceinline__ D bucket_convert(S x, BucketCompute<S, D> scale) {
  // An unscaled same-dtype convert is a copy of the bits (NaN payloads too).
  if constexpr (std::is_same_v<S, D> && !kScaled) return x;
  BucketCompute<S, D> v = bucket_widen<BucketCompute<S, D>>(x);
  if constexpr (kScaled) v = v * scale;
  return bucket_narrow<D>(v);
}

// V elements of T loaded or stored as one access (16 bytes on the wider side).
template <class T, int V>
struct alignas(sizeof(T) * V) BucketVec {
  T v[V];
};

// One chunk (n <= kBucketChunk elements) by the whole block: 16-byte accesses
// where both ends are aligned for them, coalesced scalar accesses otherwise.
template <class S, class D, bool kScaled>
__device__ __forceinline__ void bucket_convert_chunk(const S* __restrict__ src, D* __restrict__ dst,
                                                     int64_t n, BucketCompute<S, D> scale) {
  constexpr int V = 16 / (sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D));
  using SV = BucketVec<S, V>;
  using DV = BucketVec<D, V>;
  int64_t done = 0;
  if (reinterpret_cast<uintptr_t>(src) % sizeof(SV) == 0 &&
      reinterpret_cast<uintptr_t>(dst) % sizeof(DV) == 0) {
    const int64_t nvec = n / V;
    const SV* s = reinterpret_cast<const SV*>(src);
    DV* d = reinterpret_cast<DV*>(dst);
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < nvec; i += kBucketThreads) {
      const SV a = s[i];
      DV b;
#pragma unroll
      for (int k = 0; k < V; ++k) b.v[k] = bucket_convert<S, D, kScaled>(a.v[k], scale);
      d[i] = b;
    }
    done = nvec * V;
  }
  for (int64_t i = done + threadIdx.x; i < n; i += kBucketThreads) {
    dst[i] = bucket_convert<S, D, kScaled>(src[i], scale);
  }
}

// __grid_constant__: the table is read in place from the parameter space
// (indexed by a runtime value) instead of being copied per thread.
template <class S, class D, bool kScaled>
__global__ void __launch_bounds__(kBucketThreads)
    bucket_convert_slices(const __grid_constant__ BucketLaunch p) {
  const BucketSliceDesc* table = p.table != nullptr ? p.table : p.inline_table;
  const BucketCompute<S, D> scale = BucketCompute<S, D>(p.scale);
  for (int64_t chunk = blockIdx.x; chunk < p.total_chunks; chunk += gridDim.x) {
    // The last slice whose first chunk is <= chunk (empty slices own none).
    int64_t lo = 0;
    int64_t hi = p.count - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (table[mid].first_chunk <= chunk) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const BucketSliceDesc& s = table[lo];
    const int64_t begin = (chunk - s.first_chunk) * kBucketChunk;
    const int64_t left = s.numel - begin;
    const int64_t n = left < kBucketChunk ? left : kBucketChunk;
    bucket_convert_chunk<S, D, kScaled>(static_cast<const S*>(s.src) + begin,
                                        static_cast<D*>(s.dst) + begin, n, scale);
  }
}

}  // namespace pycomm::cuda
#endif  // __CUDACC__
