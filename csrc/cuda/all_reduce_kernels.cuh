// The device side of the CUDA all-reduce kernels: where a GPU block enters an
// all-reduce body (one_shot / two_shot / ring_all_reduce.cuh), and the two
// ways blocks are launched: a kernel per rank (cuda_all_reduce.cu, what the
// library runs) and every rank's blocks in one kernel (all_ranks_kernel, for
// the threads bench's --one-launch). Both go through all_reduce_block, so the
// code they run is the same.
#pragma once

#include "all_reduce_args.h"
#include "block_lanes.h"
#include "one_shot_all_reduce.cuh"
#include "ring_all_reduce.cuh"
#include "two_shot_all_reduce.cuh"

namespace pycomm::cuda {

// Block `block` of the `blocks` of rank a.rank's launch `a`. `a` must lie in
// the kernel's parameter space (a __grid_constant__ argument, or part of
// one): the bodies index its peers' pointers in place (PeerRegions).
template <core::Algorithm kAlgorithm, class T, class R>
__device__ __forceinline__ void all_reduce_block(const CudaAllReduceArgs& a, int block, int blocks) {
  const Lanes l{threadIdx.x, blockDim.x, block, blocks};
  if constexpr (kAlgorithm == core::Algorithm::kDirect) {
    one_shot_all_reduce<T, R, DeviceBlockSync>(a, l);
  } else if constexpr (kAlgorithm == core::Algorithm::kTwoShot) {
    two_shot_all_reduce<T, R, DeviceBlockSync>(a, l);
  } else {
    static_assert(kAlgorithm == core::Algorithm::kRing, "an algorithm without a body");
    ring_all_reduce<T, R, DeviceBlockSync>(a, l);
  }
}

// Every rank's arguments of one all-reduce, for ranks that are threads of one
// process: all_ranks_kernel runs them all in one launch. compute-sanitizer
// runs one kernel at a time, so ranks launched apart would each wait for the
// others until their timeout and check nothing; as blocks of one kernel they
// meet as they do on a GPU shared by ranks. Passed by value, in the kernel's
// parameter space, so that every rank's arguments are read in place there.
struct AllRanksArgs {
  CudaAllReduceArgs ranks[kMaxRanks];  // [r] is rank r's, blocks = blocks_of(ranks[r]) for every r
  int world;                           // ranks[0 .. world) are used
};
// Kernel parameters may take 32764 bytes from CUDA 12.1 on sm_70 and newer,
// 4096 before: this fits either.
static_assert(sizeof(AllRanksArgs) <= 4096, "AllRanksArgs must fit a kernel's parameter space");

// gridDim.x = world x blocks: block i is block i % blocks of rank i / blocks.
// Every block of every rank must be resident at once (they wait for each
// other): the launcher bounds the grid by the SMs and the kernel's occupancy.
template <core::Algorithm kAlgorithm, class T, class R>
__global__ void __launch_bounds__(kAllReduceThreads, kMinBlocksPerSM)
    all_ranks_kernel(const __grid_constant__ AllRanksArgs all) {
  const int blocks = int(gridDim.x) / all.world;
  all_reduce_block<kAlgorithm, T, R>(all.ranks[int(blockIdx.x) / blocks], int(blockIdx.x) % blocks, blocks);
}

}  // namespace pycomm::cuda
