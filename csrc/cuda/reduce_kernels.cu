#include "reduce_kernels.cuh"
#include "reduce_launch.h"

extern "C" cudaError_t pycomm_cuda_sum_into_f32(float* dst, const float* src, size_t n,
                                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  size_t blocks = (n / 4 + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 4096) blocks = 4096;
  pycomm::cuda::sum_into_f32<<<unsigned(blocks), threads, 0, stream>>>(dst, src, n);
  return cudaGetLastError();
}
