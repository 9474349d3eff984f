// pycomm as a torch.distributed backend: a c10d::Backend whose collectives run
// on a pycomm Communicator (shared memory, one worker thread, in call order),
// so init_process_group("cpu:pycomm") gives DDP, FSDP2 and tensor parallelism
// pycomm's transport with no hook.
//
// Native: allreduce (+coalesced), broadcast, reduce, allgather (list, into
// tensor, coalesced), reduce_scatter (list, tensor, coalesced), alltoall
// (single with even or uneven splits, list), barrier; ops SUM, AVG, MIN, MAX,
// PRODUCT, PREMUL_SUM. Everything else (send/recv, gather, scatter, bitwise
// ops, what torch adds later) goes to a gloo backend built on a prefixed copy
// of the same store, after pycomm's queued work.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>

#include "communicator.h"

namespace pycomm {

// The core's op for a c10d op, with PREMUL_SUM's factor (hierarchical.cpp uses it too).
struct Reduction {
  core::ReduceOp op = core::ReduceOp::kSum;
  bool premul = false;
  double factor = 1.0;
};
// False for the ops pycomm does not run (the bitwise ones): the caller
// forwards those to the fallback.
bool reduction_of(const c10d::ReduceOp& op, Reduction* r);

// Whether any tensor is a CUDA tensor. pycomm runs the all-reduce of CUDA
// tensors itself on one host (cuda_path.h); their other collectives, and all
// of them across hosts, go to the fallback (gloo stages them through the host).
bool any_cuda(const std::vector<at::Tensor>& ts);
bool any_cuda(const std::vector<std::vector<at::Tensor>>& lists);

class Backend : public c10d::Backend {
 public:
  Backend(std::shared_ptr<Communicator> comm, c10::intrusive_ptr<c10d::Backend> fallback);
  ~Backend() override;

  const std::string getBackendName() const override { return "pycomm"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Forwarded to the gloo backend.
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // shutdown: finishes what is queued, then closes. abort: marks the session
  // broken for every rank first, so no peer waits for this one.
  void shutdown() override;
  void abort() override;
  // COMM_ERROR once the session is broken (a timeout, a dead peer, an abort).
  c10d::ErrorType getError() override;
  // Warns and keeps the timeout: it is agreed by every rank at set-up.
  void setTimeout(std::chrono::milliseconds timeout) override;

  const std::shared_ptr<Communicator>& communicator() const { return comm_; }

 protected:
  // A group that spans hosts (hierarchical.h): `comm` covers this host's
  // ranks only, so the group's rank and size are given apart from it.
  Backend(int rank, int size, std::shared_ptr<Communicator> comm,
          c10::intrusive_ptr<c10d::Backend> fallback);

  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, Job job, bool async_op);
  // The all-reduce of CUDA tensors (csrc/torch/cuda_path.h).
  c10::intrusive_ptr<c10d::Work> cuda_allreduce(std::vector<at::Tensor>& tensors,
                                                const Reduction& red, bool async_op);
  // Waits for pycomm's queued work, then returns the fallback backend: what
  // the caller hands it may depend on that work. (The other way round, as
  // with gloo alone, a caller waits for an isend/irecv before a collective
  // uses its tensor.)
  c10d::Backend& fallback();
  // The fallback without the wait, for jobs that call it on the worker, in order.
  const c10::intrusive_ptr<c10d::Backend>& fallback_backend() const { return fallback_; }

 private:
  std::shared_ptr<Communicator> comm_;
  c10::intrusive_ptr<c10d::Backend> fallback_;
};

}  // namespace pycomm
