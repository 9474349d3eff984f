// PYCOMM_HD marks torch-free code that runs both in CUDA kernels and on host
// threads: nvcc compiles it for the GPU, g++ for the CPU core and for the
// CUDA kernels' protocol test (csrc/cuda/tests/test_cuda_protocol.cpp).
#pragma once

#if defined(__CUDACC__)
#define PYCOMM_HD __host__ __device__ __forceinline__
#else
#define PYCOMM_HD inline
#endif
