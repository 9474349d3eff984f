#include "cuda_path.h"

#include <c10/util/Exception.h>

#include "tensor_checks.h"

#ifdef PYCOMM_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <sched.h>

#include <cstring>

#include <sstream>
#include <thread>

#include "../core/errors.h"
#include "../core/transport/session.h"
#include "../cuda/cuda_all_reduce.h"
#include "../cuda/ipc_data_path.h"
#endif

namespace pycomm {

#ifdef PYCOMM_WITH_CUDA

namespace {

// After the host gives up on a kernel (a peer died, the session was aborted),
// how long it waits for the kernel to see the stop flag and exit before the
// tensors it writes are released.
constexpr uint64_t kStopGraceNs = 2'000'000'000;
// Past the session's deadline, the kernel reports its own timeout (it waits
// with the same deadline); the host's own limit is a backstop for a kernel
// that cannot report.
constexpr uint64_t kHostBackstopNs = 5'000'000'000;
// How often the host thread watching a kernel checks the peers and the abort.
constexpr uint64_t kCheckEveryNs = 1'000'000;

cuda::CudaAlgorithm cuda_algorithm_of(core::Algorithm a, int world, size_t bytes) {
  switch (a) {
    case core::Algorithm::kDirect: return cuda::CudaAlgorithm::kOneShot;
    case core::Algorithm::kTwoShot: return cuda::CudaAlgorithm::kTwoShot;
    case core::Algorithm::kRing: return cuda::CudaAlgorithm::kRing;
    case core::Algorithm::kAuto: return cuda::choose_algorithm(world, bytes);
    default: break;
  }
  throw core::InvalidArgument("algorithm: all_reduce of CUDA tensors runs auto, direct, two_shot or ring");
}

core::Algorithm core_algorithm_of(cuda::CudaAlgorithm a) {
  switch (a) {
    case cuda::CudaAlgorithm::kOneShot: return core::Algorithm::kDirect;
    case cuda::CudaAlgorithm::kTwoShot: return core::Algorithm::kTwoShot;
    case cuda::CudaAlgorithm::kRing: return core::Algorithm::kRing;
  }
  return core::Algorithm::kAuto;
}

// An event of the current device, for ordering only (no timing). Plain
// runtime calls rather than ATen's CUDAEvent, whose header pulls in the CUDA
// libraries' headers (cuSPARSE, cuBLAS) that a bare toolkit may lack.
class OrderEvent {
 public:
  OrderEvent() { C10_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~OrderEvent() { cudaEventDestroy(event_); }
  OrderEvent(const OrderEvent&) = delete;
  OrderEvent& operator=(const OrderEvent&) = delete;
  void record(cudaStream_t s) { C10_CUDA_CHECK(cudaEventRecord(event_, s)); }
  void block(cudaStream_t s) const { C10_CUDA_CHECK(cudaStreamWaitEvent(s, event_, 0)); }
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
    C10_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&status_), sizeof(cuda::DeviceStatus),
                                 cudaHostAllocMapped));
    std::memset(static_cast<void*>(status_), 0, sizeof(cuda::DeviceStatus));
    C10_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&status_device_), status_, 0));
  }
  ~CudaPath() {
    if (status_) cudaFreeHost(status_);
    cudaGetLastError();
  }

  int device() const { return memory_.device(); }

  // Runs on `stream` once `ready` has completed, and returns when the kernel
  // finished.
  void all_reduce(const core::Context& ctx, const core::AllReduceArgs& a,
                  const OrderEvent& ready, const c10::cuda::CUDAStream& stream) {
    core::Session& session = ctx.session;
    session.begin("all_reduce");
    const int world = session.world();
    const size_t bytes = a.count * core::dtype_size(a.dtype);
    const cuda::CudaAlgorithm algo = cuda_algorithm_of(a.algorithm, world, bytes);
    // The kernels' avg divides by the world size (no hierarchical scheme runs
    // on CUDA tensors yet).
    TORCH_CHECK_VALUE(a.divisor == 0 || a.divisor == world,
                      "op: avg of CUDA tensors divides by the group's size");
    session.handshake(core::fingerprint_of(core::CollectiveKind::kCudaAllReduce, a.count, a.dtype,
                                           core_algorithm_of(algo), &a.op, world));
    if (a.count == 0) return;

    ready.block(stream.stream());
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
    k.algorithm = algo;
    k.epoch_base = epoch_;
    // The kernel's waits end when the collective's time is up.
    k.timeout_ns = session.remaining_ns();
    k.status = status_device_;
    k.blocks = 0;  // the kernels' default for the size
    k.sm_count = memory_.sm_count();  // the same on every rank: keeps all ranks' blocks resident at once
    if (const char* bad = cuda::check_args(k)) {
      throw core::InvalidArgument(std::string("all_reduce (cuda): ") + bad);
    }
    C10_CUDA_CHECK(cuda::launch_all_reduce(k, stream.stream()));
    // Every rank advances the same way: the same collectives, in the same order.
    epoch_ += cuda::epochs_used(k);
    done_.record(stream.stream());
    watch(session);
  }

 private:
  // Until the kernel finished: the session's wait policy (spin, yield, sleep),
  // with the peer watch and abort. A failure stops the kernel before it raises.
  void watch(core::Session& session) {
    const core::WaitPolicy& policy = session.policy();
    const uint64_t start = core::monotonic_ns();
    const uint64_t spin_end = start + uint64_t(policy.spin_us * 1e3);
    const uint64_t yield_end = spin_end + uint64_t(policy.yield_us * 1e3);
    const uint64_t backstop = start + session.remaining_ns() + kHostBackstopNs;
    uint64_t next_check = spin_end;  // the peer watch costs a system call: not every poll
    for (;;) {
      const cudaError_t q = done_.query();
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) C10_CUDA_CHECK(q);
      const uint64_t now = core::monotonic_ns();
      if (now >= next_check) {
        next_check = now + kCheckEveryNs;
        try {
          session.check_alive();
          if (now > backstop) {
            throw core::CommTimeout(session.abort(
                "rank " + std::to_string(session.rank()) +
                ": all_reduce (cuda): the kernel neither finished nor reported within the timeout; "
                "the GPU may be hung"));
          }
        } catch (...) {
          stop_kernel();
          throw;
        }
      }
      if (now < spin_end) continue;
      if (now < yield_end) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    // `failed` is stored (release) after the record's other fields.
    if (__atomic_load_n(&status_->failed, __ATOMIC_ACQUIRE) != 0 && status_->code != 0) {
      std::ostringstream os;
      os << "rank " << session.rank() << ": all_reduce (cuda): Timed out after "
         << policy.timeout_s << " s on the GPU, still waiting for rank " << status_->peer
         << " (block " << status_->block << ", epoch " << status_->epoch << ")";
      throw core::CommTimeout(session.abort(os.str()));
    }
  }

  // Asks the kernel to exit (it polls the stop flag while it waits) and waits
  // a bounded time for it, so the tensors stay valid while it may write them.
  void stop_kernel() {
    // The kernels poll `failed` in every wait and leave when it is set.
    __atomic_store_n(&status_->failed, 1u, __ATOMIC_RELEASE);
    const uint64_t give_up = core::monotonic_ns() + kStopGraceNs;
    while (done_.query() == cudaErrorNotReady && core::monotonic_ns() < give_up) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    cudaGetLastError();
  }

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
