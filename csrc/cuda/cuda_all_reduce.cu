// Launcher of the CUDA all-reduce kernels (cuda_all_reduce.h): one kernel per
// (algorithm, element type, reduction), each a thin shell around
// all_reduce_block (all_reduce_kernels.cuh), which enters the body that the
// CPU protocol test also runs on host threads.
#include "all_reduce_dispatch.h"
#include "all_reduce_kernels.cuh"
#include "cuda_all_reduce.h"

namespace pycomm::cuda {
namespace {

// Launch bounds: at most 64 registers a thread, so kMinBlocksPerSM (2) blocks
// fit on an SM. Every rank's blocks must be resident at once (they wait for
// each other); max_blocks_per_rank (all_reduce_args.h) keeps launches within it.
//
// __grid_constant__: the arguments (about 200 bytes, the peers' pointers
// among them) are read in place from the parameter space, not copied per
// thread. The bodies rely on it: PeerRegions indexes the peers' pointers there
// by rank at run time, which needs no local memory (no stack frame).
template <class T, class R>
__global__ void __launch_bounds__(kAllReduceThreads, kMinBlocksPerSM) one_shot_kernel(const __grid_constant__ CudaAllReduceArgs a) {
  all_reduce_block<core::Algorithm::kDirect, T, R>(a, int(blockIdx.x), int(gridDim.x));
}
template <class T, class R>
__global__ void __launch_bounds__(kAllReduceThreads, kMinBlocksPerSM) two_shot_kernel(const __grid_constant__ CudaAllReduceArgs a) {
  all_reduce_block<core::Algorithm::kTwoShot, T, R>(a, int(blockIdx.x), int(gridDim.x));
}
template <class T, class R>
__global__ void __launch_bounds__(kAllReduceThreads, kMinBlocksPerSM) ring_kernel(const __grid_constant__ CudaAllReduceArgs a) {
  all_reduce_block<core::Algorithm::kRing, T, R>(a, int(blockIdx.x), int(gridDim.x));
}

}  // namespace

cudaError_t launch_all_reduce(const CudaAllReduceArgs& args, cudaStream_t stream) {
  if (check_args(args) != nullptr) return cudaErrorInvalidValue;
  if (args.count == 0) return cudaSuccess;
  CudaAllReduceArgs a = args;
  a.blocks = blocks_of(args);
  const dim3 grid(unsigned(a.blocks));
  const dim3 block(kAllReduceThreads);
  const bool known = dispatch_reduction(a.dtype, a.op, [&](auto type, auto reduction) {
    using T = decltype(type);
    using R = decltype(reduction);
    switch (a.algorithm) {
      case core::Algorithm::kDirect: one_shot_kernel<T, R><<<grid, block, 0, stream>>>(a); break;
      case core::Algorithm::kTwoShot: two_shot_kernel<T, R><<<grid, block, 0, stream>>>(a); break;
      case core::Algorithm::kRing: ring_kernel<T, R><<<grid, block, 0, stream>>>(a); break;
      default: break;  // check_args refused it
    }
  });
  if (!known) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace pycomm::cuda
