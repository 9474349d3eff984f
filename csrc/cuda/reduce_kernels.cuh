// Element-wise reduction kernels for the CUDA transport, torch-free so they
// build under CMake alone. 16-byte vector loads for the aligned body, a scalar
// loop for the tail.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

// The kernel is nvcc's only: the glue (cuda_reduce.cpp, compiled by g++)
// includes this header for the launcher's declaration below.
#if defined(__CUDACC__)
namespace pycomm::cuda {

// dst[i] += src[i] for float32, in place.
__global__ void sum_into_f32(float* __restrict__ dst, const float* __restrict__ src, size_t n) {
  const size_t tid = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(src) % 16 == 0);
  size_t vec_n = aligned ? n / 4 : 0;
  float4* d4 = reinterpret_cast<float4*>(dst);
  const float4* s4 = reinterpret_cast<const float4*>(src);
  for (size_t i = tid; i < vec_n; i += stride) {
    float4 a = d4[i];
    const float4 b = s4[i];
    a.x += b.x;
    a.y += b.y;
    a.z += b.z;
    a.w += b.w;
    d4[i] = a;
  }
  for (size_t i = vec_n * 4 + tid; i < n; i += stride) dst[i] += src[i];
}

}  // namespace pycomm::cuda
#endif  // __CUDACC__

// C entry point for the glue: launches on `stream`, returns the launch status.
extern "C" cudaError_t pycomm_cuda_sum_into_f32(float* dst, const float* src, size_t n,
                                                cudaStream_t stream);
