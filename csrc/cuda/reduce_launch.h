// Host-side entry points of the CUDA reduction kernels (reduce_kernels.cu),
// callable from plain C++ (the torch glue) without nvcc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

// dst[i] += src[i], float32, launched on `stream`; returns the launch status.
extern "C" cudaError_t pycomm_cuda_sum_into_f32(float* dst, const float* src, size_t n,
                                                cudaStream_t stream);
