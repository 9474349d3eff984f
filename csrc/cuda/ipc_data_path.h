// The CUDA IPC data path: each rank's device staging buffer and signal pad,
// mapped into every peer of the same host. Torch-free; plain C++ callers (the
// glue) use it without nvcc.
//
// Set-up is a collective over the host session (the session carries what is
// not bytes, for CPU and GPU ranks alike), in two handshakes:
//   1. every rank allocates its buffer and pad with cudaMalloc, zeroes the pad,
//      and publishes their IPC handles (and its pid) in its host slot;
//   2. every rank maps each peer's pair (cudaIpcOpenMemHandle; a peer in the
//      same process, as when ranks are threads, is used by pointer: a handle
//      cannot be opened in the process that made it) and publishes whether
//      that worked.
// A failure on any rank, in either step, raises CommError on every rank, and
// whatever was allocated or mapped is released. Each step is bounded by the
// session's deadline, peer watch and abort, like every collective.
//
// Several ranks may share one GPU: between processes on one device, IPC works
// without peer access. Ranks on different GPUs need peer access between them
// (cudaIpcMemLazyEnablePeerAccess turns it on).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../core/transport/session.h"
#include "../core/transport/shm_data_path.h"

namespace pycomm::cuda {

class IpcDataPath {
 public:
  // Collective: every rank of the session calls it at the same point of its
  // sequence of collectives, with the same sizes (checked by the handshake).
  IpcDataPath(core::Session& session, core::ShmDataPath& host_path, int device,
              size_t buffer_bytes, size_t pad_bytes);
  ~IpcDataPath();
  IpcDataPath(const IpcDataPath&) = delete;
  IpcDataPath& operator=(const IpcDataPath&) = delete;

  int device() const { return device_; }
  size_t buffer_bytes() const { return buffer_bytes_; }
  // The fewest SMs among the ranks' GPUs (exchanged at set-up): the same on
  // every rank, as CudaAllReduceArgs::sm_count must be.
  int sm_count() const { return sm_count_; }
  // Rank r's staging buffer and signal pad, as this process addresses them.
  void* buffer(int r) const { return buffers_[size_t(r)]; }
  void* pad(int r) const { return pads_[size_t(r)]; }

 private:
  void release() noexcept;

  int rank_;
  int device_;
  size_t buffer_bytes_;
  int sm_count_ = 0;
  void* own_buffer_ = nullptr;
  void* own_pad_ = nullptr;
  std::vector<void*> buffers_;
  std::vector<void*> pads_;
  std::vector<bool> opened_;  // mapped through IPC, to be closed (not freed) here
};

}  // namespace pycomm::cuda
