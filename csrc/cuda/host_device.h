// PYCOMM_HD (core/host_device.h) marks code that runs both in CUDA kernels and
// on host threads: the all-reduce kernel bodies and their signalling protocol
// are compiled by nvcc for the GPU and by g++ for the CPU protocol test
// (tests/test_cuda_protocol.cpp), which runs them with threads standing in for
// ranks and blocks.
#pragma once

#include "../core/host_device.h"

// Before a loop that nvcc must not unroll: thread 0's loops over the peers in
// a barrier, whose unrolled copies held several peers' flag addresses at once
// in registers that the element loops needed (no gain: each store waits for
// a system-scope fence anyway).
#if defined(__CUDA_ARCH__)
#define PYCOMM_NO_UNROLL _Pragma("unroll 1")
#else
#define PYCOMM_NO_UNROLL
#endif
