// pycomm as a torch.distributed backend: the one c10d front-end, and the
// front door of pycomm's own API too (pycomm.all_reduce and barrier enter
// through all_reduce_call() and barrier() below, module.cpp). Every collective goes
// through the same steps, once: map the op, ask the routing table
// (csrc/core/routing.h) what runs it and how (a plan, the CUDA path, or the
// gloo fallback for what pycomm does not run), check the arguments, pack lists
// into flat buffers, apply premul_sum's factor, and queue a job that hands flat
// 1-D work and the table's algorithm to the plan (plan.h) on the
// communicator's worker, in call order. So init_process_group("cpu:pycomm")
// gives DDP, FSDP2 and tensor parallelism pycomm's transport with no hook.
//
// Native: allreduce (+coalesced), broadcast, reduce, allgather (list, into
// tensor, coalesced), reduce_scatter (list, tensor, coalesced), alltoall
// (single with even or uneven splits, list), barrier, and on one host gather
// and scatter, send/recv (the communicator's point-to-point engine, beside its
// queue rather than in it); ops SUM, AVG, MIN, MAX, PRODUCT, PREMUL_SUM, BAND,
// BOR, BXOR. Every dtype (dtype_map.h: moved by its bytes, reduced where it
// has arithmetic) and every strided layout (staged_tensor.h: what is not
// contiguous is copied in and out). Everything else (sparse tensors, CUDA
// tensors but the CUDA all-reduce's, what torch adds later) goes to a gloo
// backend built on a prefixed copy of the same store, after pycomm's queued
// work; pycomm's own API on one host has none, and refuses those calls.
//
// The class is defined over several files, one concern each: frontend.cpp
// (routing, launching jobs, the backend's state), frontend_all_reduce.cpp
// (the all-reduce entry and its call object), frontend_collectives.cpp (the
// other collectives) and frontend_p2p.cpp (send and receive).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <memory>

#include "../core/call_profile.h"
#include "all_reduce_call.h"
#include "call_where.h"
#include "communicator.h"
#include "plan.h"
#include "staged_tensor.h"

namespace pycomm {

// The c10d backend torch holds for a pycomm group, and the one entry of every
// call: dist.* through c10d, pycomm.all_reduce through its binding (module.cpp).
class FrontEnd : public c10d::Backend {
 public:
  // rank, size: in the group. `comm` covers the ranks of this host (all of
  // them, for a group on one host); `plan` runs on it. `fallback` may be null
  // (pycomm's own API on one host): what would go to it is then refused.
  FrontEnd(int rank, int size, std::shared_ptr<Communicator> comm, std::shared_ptr<const Plan> plan,
          c10::intrusive_ptr<c10d::Backend> fallback);
  ~FrontEnd() override;

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

  // Native on one host; the gloo backend's across hosts.
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  // Native on one host (the communicator's point-to-point engine), any dtype;
  // the gloo backend's across hosts and for CUDA or sparse tensors.
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
  // This rank's timeout for the calls that begin from now on (the fallback's too).
  void setTimeout(std::chrono::milliseconds timeout) override;

  // c10d's sequence number: the collectives this rank has called on the
  // group, pycomm's and the fallback's (point-to-point is not one), the same
  // on every rank that is in step. TORCH_DISTRIBUTED_DEBUG=DETAIL's checks
  // compare it across ranks.
  uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }
  // Every rank's count starts at 0 when the backend is made (torch 2.11 asks
  // for this; later releases made it a no-op).
  void setSequenceNumberForGroup() override {}

  const std::shared_ptr<Communicator>& communicator() const { return comm_; }

  // The one all-reduce entry, where every way in meets (all_reduce_call.h):
  // c10d's allreduce and allreduce_coalesced above, with c10d's options, and
  // pycomm.all_reduce and torch.ops.pycomm.all_reduce_, with their own.
  c10::intrusive_ptr<c10d::Work> all_reduce_call(std::vector<at::Tensor>& tensors, AllReduceCall call);

 private:
  // The routing table's query for a call: the plan's layout and thresholds,
  // the call's tensors (`w`; the core's dtype of their first one, mapped
  // here), reduction and requested algorithm; route_of adds a message's size.
  core::RouteQuery query(core::Collective c, const CallWhere& w, const Reduction& red,
                         core::Algorithm requested = core::Algorithm::kAuto) const;
  // What runs a call whose messages' sizes decide nothing (the collectives
  // whose plan methods take no algorithm).
  core::PlanKind plan_of(core::Collective c, const CallWhere& w) const;
  // The table's answer for a message of `sized`'s size per rank (`times`
  // copies of it: reduce_scatter's list); undefined: no size.
  static core::Route route_of(core::RouteQuery q, const at::Tensor& sized, int64_t times = 1);
  // The algorithm for each of a call's messages, `first` being the first's
  // route (what runs them does not depend on their sizes).
  static std::vector<core::Algorithm> algorithms_of(const core::RouteQuery& q, const core::Route& first,
                                                    const std::vector<at::Tensor>& sized);

  // The decisions of an all-reduce (all_reduce_call.h), made once: fills
  // call.plan and, unless the fallback runs it, checks the tensors and
  // fills call.steps.
  void resolve(const std::vector<at::Tensor>& tensors, AllReduceCall& call) const;
  // Whether `t` lies, contiguous, in the symmetric memory of this host's
  // group (a field of the query `q`), filling `place`.
  bool symmetric(const core::RouteQuery& q, const at::Tensor& t, SymmetricPlace* place) const;
  c10::intrusive_ptr<c10d::Work> fallback_all_reduce(std::vector<at::Tensor>& tensors, const AllReduceCall& call);
  c10::intrusive_ptr<c10d::Work> cuda_all_reduce(std::vector<at::Tensor>& tensors, AllReduceCall& call);

  // Runs `body` in the caller's thread when the caller waits anyway and the
  // communicator is idle; else queues it. `blocking`: returns null once done.
  template <class Body>
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const std::vector<at::Tensor>& outputs,
                                        Body body, bool async_op, bool blocking);
  // The same for a made job (a CUDA job carries its stream and devices).
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, Job job, bool async_op, bool blocking = false);
  // The Work of a job that has run already.
  c10::intrusive_ptr<c10d::Work> finished(c10d::OpType type, Job job) const;
  c10::intrusive_ptr<c10d::Work> all_gather_tensors(std::vector<at::Tensor>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    std::vector<core::Algorithm> algorithms, bool async_op);
  // allgather's lists: list i holds the world's copies of input i.
  c10::intrusive_ptr<c10d::Work> all_gather_lists(const std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  std::vector<core::Algorithm> algorithms,
                                                  c10d::OpType type, bool async_op);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensors(std::vector<at::Tensor>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const Reduction& red,
                                                        std::vector<core::Algorithm> algorithms,
                                                        bool async_op);
  // `send` and `recv` point into the staged tensors' flat views.
  c10::intrusive_ptr<c10d::Work> all_to_all(c10d::OpType type, std::vector<at::Tensor> outputs,
                                            Blocks send, Blocks recv, std::vector<StagedTensor> ins,
                                            std::vector<StagedTensor> outs, bool async_op);
  // send, recv and recvAnysource (peer kAnySource) on the engine.
  c10::intrusive_ptr<c10d::Work> point_to_point(core::P2POp::Kind kind, std::vector<at::Tensor>& tensors,
                                                int peer, int tag);
  // The start of every collective's entry: counts it (c10d's sequence number)
  // and times the call while the profile is on (core/call_profile.h).
  core::PartTimer enter() {
    ++sequence_;
    return core::PartTimer(core::CallPart::kCall);
  }
  // Waits for pycomm's queued work, then returns the fallback backend: what
  // the caller hands it may depend on that work. (The other way round, as
  // with gloo alone, a caller waits for an isend/irecv before a collective
  // uses its tensor.) c10d's calls always have one.
  c10d::Backend& fallback();

  std::shared_ptr<Communicator> comm_;
  // Shared with every queued job, which may still run while the backend is
  // destroyed (its communicator's worker finishes the job it is in).
  std::shared_ptr<const Plan> plan_;
  c10::intrusive_ptr<c10d::Backend> fallback_;  // null: pycomm's own API on one host
  // Counted at the top of every collective's entry point.
  std::atomic<uint64_t> sequence_{0};
};

}  // namespace pycomm
