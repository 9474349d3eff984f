// pycomm's all-reduce of CUDA tensors: the glue between a communicator's job
// queue and the CUDA IPC data path (csrc/cuda/ipc_data_path.h) and kernels
// (csrc/cuda/cuda_all_reduce.h).
//
// A job runs on pycomm's stream of the tensor's device, ordered after the
// caller's current stream by an event recorded when the job was made. The
// host thread that runs it handshakes with the peers first (so a mismatch is
// CollectiveMismatch on every rank before any kernel starts), launches the
// kernel, and then watches it until it finished: the kernel's own waits on
// peers end at the session's deadline and report through host-mapped memory,
// and the host adds the peer watch and the session's abort. So a future
// completes once its result is in memory, and an error reaches the future of
// the collective that failed.
#pragma once

#include <ATen/ATen.h>

#include "../core/collectives/collectives.h"
#include "communicator.h"

namespace pycomm {

// Checks `tensor` (named `arg` in errors), refuses CUDA graph capture, and
// returns the job of the in-place all-reduce `args` (count, dtype, data, op
// and the routing table's algorithm already set) of `tensor`. TypeError in a
// build without CUDA.
Job cuda_all_reduce_job(Communicator& comm, const at::Tensor& tensor, const char* arg,
                        const core::AllReduceArgs& args);

}  // namespace pycomm
