#include "cuda_path.h"

#include <c10/util/Exception.h>

#include "tensor_checks.h"

#ifdef PYCOMM_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "../core/errors.h"
#include "../core/transport/session.h"
#include "../cuda/cuda_all_reduce.h"
#include "../cuda/ipc_data_path.h"
#include "../cuda/kernel_watch.h"
#include "../cuda/runtime_errors.h"
#endif

namespace pycomm {

#ifdef PYCOMM_WITH_CUDA

namespace {

// An event of the current device, for ordering only (no timing). Plain
// runtime calls rather than ATen's CUDAEvent, whose header pulls in the CUDA
// libraries' headers (cuSPARSE, cuBLAS) that a bare toolkit may lack.
class OrderEvent {
 public:
  OrderEvent() { C10_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~OrderEvent() { cudaEventDestroy(event_); }
  OrderEvent(const OrderEvent&) = delete;
  OrderEvent& operator=(const OrderEvent&) = delete;
  void record(cudaStream_t s) { C10_CUDA_CHECK(try_record(s)); }
  cudaError_t try_record(cudaStream_t s) { return cudaEventRecord(event_, s); }
  cudaError_t try_block(cudaStream_t s) const { return cudaStreamWaitEvent(s, event_, 0); }
  cudaError_t query() const { return cudaEventQuery(event_); }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

class CudaPath {
 public:
  // Collective (through the session): every rank makes its CudaPath with its
  // first CUDA collective.
  CudaPath(const core::Context& ctx, int device)
      : memory_(ctx.session, ctx.path, device, ctx.tuning.cuda_buffer_bytes,
                cuda::signal_pad_bytes()),
        done_() {
    // Written by the kernels (an error record) and by this host thread (the
    // stop flag), read by both: pinned host memory mapped into the device.
    cudaError_t err = cudaHostAlloc(reinterpret_cast<void**>(&status_), sizeof(cuda::DeviceStatus),
                                    cudaHostAllocMapped);
    if (err == cudaSuccess) {
      std::memset(static_cast<void*>(status_), 0, sizeof(cuda::DeviceStatus));
      err = cudaHostGetDevicePointer(reinterpret_cast<void**>(&status_device_), status_, 0);
    }
    if (err != cudaSuccess) {
      // The peers' set-up passed and they go on to the first collective, where
      // they would wait for this rank until the timeout: end it for them now.
      const std::string why = cudaGetErrorString(err);
      cuda::forget_own_error(err);
      if (status_) cuda::forget_own_error(cudaFreeHost(status_));
      status_ = nullptr;
      throw core::CommError(ctx.session.abort(
          "rank " + std::to_string(ctx.session.rank()) +
          ": cuda set-up: the kernels' status record (cudaHostAlloc, mapped): " + why));
    }
  }
  ~CudaPath() {
    if (status_) cuda::forget_own_error(cudaFreeHost(status_));
  }

  int device() const { return memory_.device(); }

  // Runs on `stream` once `ready` has completed, and returns when the kernel
  // finished.
  void all_reduce(const core::Context& ctx, const core::AllReduceArgs& a,
                  const OrderEvent& ready, const c10::cuda::CUDAStream& stream) {
    core::Session& session = ctx.session;
    session.begin("all_reduce");
    const int world = session.world();
    // The routing table's (it resolved auto by size) or the caller's.
    if (a.algorithm != core::Algorithm::kDirect && a.algorithm != core::Algorithm::kTwoShot &&
        a.algorithm != core::Algorithm::kRing) {
      throw core::InvalidArgument("algorithm: all_reduce of CUDA tensors runs auto, direct, two_shot or ring");
    }
    // The kernels' avg divides by the world size (no hierarchical scheme runs
    // on CUDA tensors yet).
    TORCH_CHECK_VALUE(a.divisor == 0 || a.divisor == world,
                      "op: avg of CUDA tensors divides by the group's size");
    cuda::CudaAllReduceArgs k;
    k.rank = session.rank();
    k.world = world;
    for (int r = 0; r < world; ++r) {
      k.peers.buffers[r] = memory_.buffer(r);
      k.peers.pads[r] = static_cast<cuda::SignalPad*>(memory_.pad(r));
    }
    k.peers.buffer_bytes = memory_.buffer_bytes();
    k.input = a.data;
    k.output = a.data;
    k.count = a.count;
    k.dtype = a.dtype;
    k.op = a.op;
    k.algorithm = a.algorithm;
    k.epoch_base = epoch_;
    k.status = status_device_;
    k.blocks = 0;  // the kernels' default for the size
    k.sm_count = memory_.sm_count();  // the same on every rank: keeps all ranks' blocks resident at once
    k.timeout_ns = session.remaining_ns();  // the whole timeout, as begin() set it
    // Before the handshake: a refused call has sent nothing.
    if (a.count != 0) {
      if (const char* bad = cuda::check_args(k)) {
        throw core::InvalidArgument(std::string("all_reduce (cuda): ") + bad);
      }
    }
    session.handshake(core::fingerprint_of(core::FingerprintKind::kCudaAllReduce, a.count, a.dtype,
                                           a.algorithm, &a.op, world));
    if (a.count == 0) return;
    // The kernel's waits end when the collective's time is up (a handshake
    // that used all of it has thrown already).
    k.timeout_ns = std::max<uint64_t>(session.remaining_ns(), 1);

    // Every rank advances the same way: the same collectives, in the same
    // order, whatever happens to this launch (a failed one aborts the session).
    epoch_ += cuda::epochs_used(k);
    cuda::KernelCallbacks kernel;
    kernel.launch = [&]() -> std::string {
      cudaError_t err = ready.try_block(stream.stream());
      if (err == cudaSuccess) err = cuda::launch_all_reduce(k, stream.stream());
      if (err == cudaSuccess) err = done_.try_record(stream.stream());
      if (err == cudaSuccess) return {};
      cuda::forget_own_error(err);
      return cudaGetErrorString(err);
    };
    kernel.poll = [&]() -> cuda::KernelPoll {
      const cudaError_t q = done_.query();
      if (q == cudaSuccess) return {cuda::KernelPoll::kFinished, {}};
      cuda::forget_own_error(q);
      if (q == cudaErrorNotReady) return {cuda::KernelPoll::kRunning, {}};
      return {cuda::KernelPoll::kFailed, cudaGetErrorString(q)};
    };
    cuda::run_watched_kernel(session, "all_reduce (cuda)", status_, kernel);
  }

 private:
  cuda::IpcDataPath memory_;
  OrderEvent done_;
  cuda::DeviceStatus* status_ = nullptr;         // host view
  cuda::DeviceStatus* status_device_ = nullptr;  // the kernels' view of the same memory
  uint64_t epoch_ = 0;  // the last epoch used; the next launch starts above it
};

void CudaPathDelete::operator()(CudaPath* p) const { delete p; }

Job cuda_all_reduce_job(Communicator& comm, const at::Tensor& tensor, const char* arg,
                        const core::AllReduceArgs& args) {
  TORCH_CHECK_VALUE(c10::cuda::currentStreamCaptureStatusMayInitCtx() ==
                        c10::cuda::CaptureStatus::None,
                    arg, ": pycomm cannot all-reduce inside CUDA graph capture yet (its kernels "
                    "are watched by a host thread); run the collective outside the graph");
  const int device = tensor.get_device();
  // Recorded now, on the caller's stream: the kernel waits for what the
  // caller queued before this call, and nothing after.
  c10::cuda::CUDAGuard guard{static_cast<c10::DeviceIndex>(device)};
  auto ready = std::make_shared<OrderEvent>();
  ready->record(c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(device)).stream());
  // Any stream of the pool serves: the host runs the jobs one after the other,
  // each to its end, so their order is the queue's whatever the stream.
  const c10::cuda::CUDAStream stream =
      c10::cuda::getStreamFromPool(/*isHighPriority=*/true, c10::DeviceIndex(device));
  Job job;
  job.outputs = {tensor};
  job.devices = {tensor.device()};
  job.stream = stream;
  auto& path = comm.cuda_path();
  job.body = [&path, args, ready, stream, device, arg](const core::Context& ctx) {
    c10::cuda::CUDAGuard guard{static_cast<c10::DeviceIndex>(device)};
    if (!path) path.reset(new CudaPath(ctx, device));
    TORCH_CHECK_VALUE(path->device() == device, arg, ": on cuda:", device,
                      ", but this communicator's CUDA buffers are on cuda:", path->device(),
                      " (one device per rank and communicator)");
    path->all_reduce(ctx, args, *ready, stream);
  };
  return job;
}

#else  // !PYCOMM_WITH_CUDA

void CudaPathDelete::operator()(CudaPath*) const {}

Job cuda_all_reduce_job(Communicator&, const at::Tensor& tensor, const char* arg,
                        const core::AllReduceArgs&) {
  TORCH_CHECK_TYPE(false, arg, ": a CUDA tensor, but this pycomm build has no CUDA support "
                   "(built without a CUDA toolkit, or with PYCOMM_CUDA=0); got device ",
                   tensor.device());
}

#endif

}  // namespace pycomm
