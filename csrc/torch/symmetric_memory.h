// PyTorch's symmetric memory (torch.distributed._symmetric_memory) for CPU
// tensors, on pycomm's shared memory.
//
// torch keys its symmetric-memory allocators by device type and ships none for
// the CPU; pycomm registers one when _C loads (register_symmetric_memory()):
//   symm_mem.empty(..., device="cpu")  an anonymous segment (a sealed memfd:
//                                      nothing is named in /dev/shm), holding
//                                      the buffer and, behind it, its signal pad;
//   symm_mem.rendezvous(t, group)      on a pycomm group, each rank offers its
//                                      segment through the group's segment server
//                                      (the same socket, credentials and secret
//                                      as its point-to-point channels) and maps
//                                      every peer's: a CpuSymmetricMemory, made
//                                      once per buffer and group and then cached.
// The handle's waits (barrier, put_signal, wait_signal) are bounded: a peer's
// exit raises PeerDied naming it, the timeout (the call's, else the group's)
// CommTimeout. The torch.ops.symm_mem kernels pycomm serves on CPU are in
// symmetric_memory_ops.cpp.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../core/transport/shm_segment.h"
#include "symmetric_place.h"

namespace pycomm::core {
class Session;
}

namespace pycomm {

class Communicator;

class CpuSymmetricMemory : public c10d::symmetric_memory::SymmetricMemory {
 public:
  // segments[r]: rank r's segment, mapped here ([buffer | signal pad]);
  // buffer_bytes: what was allocated (the signal pad starts at pad_offset).
  // number: this buffer's rendezvous on the communicator (1, 2, ...: the
  // same on every rank).
  CpuSymmetricMemory(std::vector<std::shared_ptr<core::ShmSegment>> segments, size_t buffer_bytes,
                     size_t pad_offset, size_t pad_bytes, int rank, uint64_t number,
                     const std::shared_ptr<Communicator>& comm);
  ~CpuSymmetricMemory() override;

  std::vector<void*> get_buffer_ptrs() override { return buffers_; }
  // The pads, refused (ValueError) while signal_pad_size is larger than this
  // buffer's pad: see checked_pads().
  std::vector<void*> get_signal_pad_ptrs() override;
  // On a CPU the "device" arrays are these host arrays.
  void** get_buffer_ptrs_dev() override { return buffers_.data(); }
  void** get_signal_pad_ptrs_dev() override;
  size_t get_buffer_size() override { return buffer_bytes_; }
  size_t get_offset() override { return 0; }
  bool has_multicast_support() override { return false; }
  void* get_multicast_ptr() override { return nullptr; }

  // The signal pad holds one uint32 slot per (channel, peer): the slot
  // (c, s) of rank d's pad is set to 1 by s (put_signal, once it is 0 again)
  // and reset to 0 by d (wait_signal). timeout_ms 0: the group's timeout.
  void barrier(int channel, size_t timeout_ms) override;
  void put_signal(int dst_rank, int channel, size_t timeout_ms) override;
  void wait_signal(int src_rank, int channel, size_t timeout_ms) override;

  int get_rank() override { return rank_; }
  int get_world_size() override { return int(buffers_.size()); }
  c10::Device get_device() override { return c10::Device(c10::kCPU); }
  bool world_within_direct_access() override { return true; }

  char* buffer(int r) const { return static_cast<char*>(buffers_[r]); }
  uint64_t number() const { return number_; }
  // Whether this handle belongs to the communicator whose session is `s`, alive.
  bool on_session(const core::Session& s) const;

 private:
  // pads_, once signal_pad_size is checked not to exceed pad_bytes_.
  std::vector<void*>& checked_pads();
  // Rank pad_rank's slot for signals from `from` on `channel`.
  uint32_t* slot(int pad_rank, int channel, int from, const char* what);
  // Moves *slot from `from` to `to` once it holds `from`; bounded as above.
  void await_swap(uint32_t* slot, uint32_t from, uint32_t to, int peer, int channel,
                  const char* what, size_t timeout_ms);

  std::vector<std::shared_ptr<core::ShmSegment>> segments_;  // keeps the mappings
  std::vector<void*> buffers_;
  std::vector<void*> pads_;
  size_t buffer_bytes_;
  size_t pad_bytes_;
  int rank_;
  uint64_t number_;
  std::weak_ptr<Communicator> comm_;  // its session: liveness and the timeout
  const core::Session* session_;      // which session that is (compared, never used)
};

// The handle of `tensor`'s buffer on the group named `group_name` (its
// rendezvous, made on first use). ValueError naming `op` when the tensor is
// not CPU symmetric memory, or the group is not a pycomm group on one host.
c10::intrusive_ptr<CpuSymmetricMemory> cpu_symmetric_memory(const at::Tensor& tensor,
                                                            const std::string& group_name,
                                                            const char* op);

// Where a contiguous CPU tensor lies in symmetric memory rendezvoused on the
// communicator whose session is `session`: every rank's copy of it and its
// place (the backend's all-reduce then runs in place). False for any other
// tensor: one atomic load while no handle lives.
bool symmetric_place(const at::Tensor& t, const core::Session& session, SymmetricPlace* out);

// What a wait of this file (a rendezvous, a signal) runs inside: `enter`'s
// result is held for the wait. torch's bindings of the handle and of
// rendezvous keep the GIL, and a wait must not: pycomm's completion lane takes
// it to drop a finished job's tensors, and a rendezvous waits for the group's
// barrier job behind that. module.cpp, the one file that knows Python, sets one
// that lets go of the GIL.
void set_blocking_scope(std::function<std::shared_ptr<void>()> enter);

// Registers pycomm's allocator for the CPU (and by the name "pycomm", for
// symm_mem.set_backend). Called once, when _C loads.
void register_symmetric_memory();

}  // namespace pycomm
