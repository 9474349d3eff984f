#include "ipc_data_path.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "../core/collective.h"
#include "../core/errors.h"
#include "runtime_errors.h"

namespace pycomm::cuda {
namespace {

// What a rank publishes in its host slot at each set-up step.
struct Published {
  int32_t failed = 0;  // this rank's step failed; `message` says why
  int32_t pid = 0;
  int32_t device = 0;
  int32_t sm_count = 0;  // of `device`
  cudaIpcMemHandle_t buffer_handle{};
  cudaIpcMemHandle_t pad_handle{};
  uint64_t buffer_ptr = 0;  // how a peer in the same process addresses them
  uint64_t pad_ptr = 0;
  char message[256] = {};
};

// Makes `device` current for the set-up and restores the caller's.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

void fail_into(Published& p, const char* what, cudaError_t err) {
  p.failed = 1;
  std::snprintf(p.message, sizeof(p.message), "%s: %s", what, cudaGetErrorString(err));
  forget_own_error(err);  // reported here, in every rank's error
}

// Zeroes the pad on a stream of its own and waits for that stream alone. The
// legacy default stream, or a device-wide sync, would also wait for whatever
// the caller queued before its first collective (a long training step, or a
// peer that is sleeping on its stream), and this rank would miss the set-up's
// handshake; with ranks as threads it would wait for the other communicators'
// kernels, which wait for this one.
cudaError_t zero_on_private_stream(void* p, size_t bytes) {
  cudaStream_t s = nullptr;
  cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) return err;
  err = cudaMemsetAsync(p, 0, bytes, s);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  const cudaError_t destroyed = cudaStreamDestroy(s);
  return err != cudaSuccess ? err : destroyed;
}

// Publishes `mine`, enters the handshake, and throws CommError on every rank
// if any rank failed its step (naming the lowest one, identically everywhere).
// Returns the peers' records.
std::vector<Published> exchange(core::Session& session, core::ShmDataPath& host_path,
                                const Published& mine, const core::Fingerprint& fp) {
  static_assert(sizeof(Published) <= 4096, "a set-up record must fit any host slot");
  std::memcpy(host_path.next_slot(), &mine, sizeof(Published));
  session.handshake(fp);
  std::vector<Published> all(size_t(session.world()));
  for (int r = 0; r < session.world(); ++r) {
    std::memcpy(&all[size_t(r)], host_path.slot(r), sizeof(Published));
  }
  for (int r = 0; r < session.world(); ++r) {
    if (all[size_t(r)].failed) {
      // The same message on every rank: it names the rank that failed.
      throw core::CommError("CUDA set-up failed on rank " + std::to_string(r) + ": " +
                            all[size_t(r)].message);
    }
  }
  return all;
}

}  // namespace

IpcDataPath::IpcDataPath(core::Session& session, core::ShmDataPath& host_path, int device,
                         size_t buffer_bytes, size_t pad_bytes)
    : rank_(session.rank()),
      device_(device),
      buffer_bytes_(buffer_bytes),
      buffers_(size_t(session.world()), nullptr),
      pads_(size_t(session.world()), nullptr),
      opened_(size_t(session.world()), false) {
  DeviceScope scope(device);
  const core::Fingerprint fp = core::fingerprint_of(core::FingerprintKind::kCudaSetup, buffer_bytes,
                                                    core::DType::kUInt8, core::Algorithm::kDirect);
  try {
    session.begin("cuda set-up");
    // Step 1: allocate and export. The pad is zeroed (and the zeroing has
    // finished) before any peer can learn its handle: peers write flags into it.
    Published mine;
    mine.pid = int32_t(getpid());
    mine.device = device;
    cudaError_t err = cudaDeviceGetAttribute(&mine.sm_count, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) {
      fail_into(mine, "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)", err);
    } else if ((err = cudaMalloc(&own_buffer_, buffer_bytes)) != cudaSuccess) {
      own_buffer_ = nullptr;
      fail_into(mine, "cudaMalloc of the staging buffer", err);
    } else if ((err = cudaMalloc(&own_pad_, pad_bytes)) != cudaSuccess) {
      own_pad_ = nullptr;
      fail_into(mine, "cudaMalloc of the signal pad", err);
    } else if ((err = zero_on_private_stream(own_pad_, pad_bytes)) != cudaSuccess) {
      fail_into(mine, "zeroing the signal pad", err);
    } else if ((err = cudaIpcGetMemHandle(&mine.buffer_handle, own_buffer_)) != cudaSuccess ||
               (err = cudaIpcGetMemHandle(&mine.pad_handle, own_pad_)) != cudaSuccess) {
      fail_into(mine, "cudaIpcGetMemHandle", err);
    }
    mine.buffer_ptr = reinterpret_cast<uint64_t>(own_buffer_);
    mine.pad_ptr = reinterpret_cast<uint64_t>(own_pad_);
    const std::vector<Published> peers = exchange(session, host_path, mine, fp);
    // The kernels' default block count depends on it and must be the same on
    // every rank, whichever GPU each has.
    sm_count_ = peers[0].sm_count;
    for (const Published& p : peers) sm_count_ = p.sm_count < sm_count_ ? p.sm_count : sm_count_;

    // Step 2: map every peer's buffer and pad.
    Published mapped;
    for (int r = 0; r < session.world() && !mapped.failed; ++r) {
      const Published& p = peers[size_t(r)];
      if (r == rank_ || p.pid == mine.pid) {
        buffers_[size_t(r)] = reinterpret_cast<void*>(p.buffer_ptr);
        pads_[size_t(r)] = reinterpret_cast<void*>(p.pad_ptr);
        continue;
      }
      void* buf = nullptr;
      void* pad = nullptr;
      err = cudaIpcOpenMemHandle(&buf, p.buffer_handle, cudaIpcMemLazyEnablePeerAccess);
      if (err == cudaSuccess) {
        err = cudaIpcOpenMemHandle(&pad, p.pad_handle, cudaIpcMemLazyEnablePeerAccess);
        if (err != cudaSuccess) cudaIpcCloseMemHandle(buf);
      }
      if (err != cudaSuccess) {
        char what[96];
        std::snprintf(what, sizeof(what), "mapping rank %d's memory (its cuda:%d, ours cuda:%d)",
                      r, p.device, device);
        fail_into(mapped, what, err);
        break;
      }
      buffers_[size_t(r)] = buf;
      pads_[size_t(r)] = pad;
      opened_[size_t(r)] = true;
    }
    exchange(session, host_path, mapped, fp);
  } catch (...) {
    release();
    throw;
  }
}

IpcDataPath::~IpcDataPath() { release(); }

void IpcDataPath::release() noexcept {
  // Errors are ignored here: at interpreter exit the CUDA runtime may already
  // be unloading, and the driver frees a process's memory when it exits.
  DeviceScope scope(device_);
  for (size_t r = 0; r < buffers_.size(); ++r) {
    if (opened_[r]) {
      forget_own_error(cudaIpcCloseMemHandle(buffers_[r]));
      forget_own_error(cudaIpcCloseMemHandle(pads_[r]));
      opened_[r] = false;
    }
    buffers_[r] = pads_[r] = nullptr;
  }
  if (own_buffer_) forget_own_error(cudaFree(own_buffer_));
  if (own_pad_) forget_own_error(cudaFree(own_pad_));
  own_buffer_ = own_pad_ = nullptr;
}

}  // namespace pycomm::cuda
