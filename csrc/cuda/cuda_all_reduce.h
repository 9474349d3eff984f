// The CUDA all-reduce among the ranks of one host, torch-free and callable
// from plain C++ (the torch glue, the benchmark). Each rank owns a staging
// buffer and a signal pad in device memory and sees every peer's (CUDA IPC,
// or shared pointers in one process): PeerMemory, peer_memory.h. Three
// algorithms, each a kernel whose ranks meet through flags in the pads:
// one-shot, two-shot and a pipelined ring (one_shot_all_reduce.cuh,
// two_shot_all_reduce.cuh, ring_all_reduce.cuh; the protocol in
// signal_protocol.h).
//
// Set-up, once per communicator: every rank allocates a staging buffer of the
// same size (16-byte aligned; cudaMalloc's are) and a pad of signal_pad_bytes(),
// zeroes its pad (on a stream of its own: ipc_data_path.cu) before any peer's
// kernel can run, and zeroes a DeviceStatus in host-mapped pinned memory
// (cudaHostAlloc(..., cudaHostAllocMapped); pass the device pointer). Per
// all-reduce, on every rank in the same order:
//   1. fill CudaAllReduceArgs (all_reduce_args.h) with the same algorithm,
//      count, dtype, op, blocks and epoch_base on every rank;
//   2. launch_all_reduce(args, stream);
//   3. epoch_base += epochs_used(args).
// Inputs larger than the staging buffer are reduced in pieces inside one
// launch. input may equal output. All ranks' kernels must be able to run at
// the same time (they wait for each other): pass the GPU's SM count in
// sm_count, and the default block count keeps every rank's blocks resident
// at once (max_blocks_per_rank; an explicit count beyond it is rejected).
// After the stream has run the launch, status->code != 0 means it timed out
// waiting for status->peer; the results are then undefined and the
// communicator must not launch again.
#pragma once

#include <cuda_runtime_api.h>

#include "../core/dtypes.h"
#include "all_reduce_args.h"
#include "peer_memory.h"

namespace pycomm::cuda {

// Enqueues the all-reduce on `stream`. cudaErrorInvalidValue (nothing
// launched) when check_args(args) names a problem; cudaSuccess without a
// launch when count == 0; else the launch's status.
cudaError_t launch_all_reduce(const CudaAllReduceArgs& args, cudaStream_t stream);

}  // namespace pycomm::cuda
