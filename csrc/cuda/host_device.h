// PYCOMM_HD marks code that runs both in CUDA kernels and on host threads: the
// all-reduce kernel bodies and their signalling protocol are compiled by nvcc
// for the GPU and by g++ for the CPU protocol test (tests/test_cuda_protocol.cpp),
// which runs them with threads standing in for ranks and blocks.
#pragma once

#if defined(__CUDACC__)
#define PYCOMM_HD __host__ __device__ __forceinline__
#else
#define PYCOMM_HD inline
#endif
