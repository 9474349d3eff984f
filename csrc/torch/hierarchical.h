// The pycomm backend of a group whose ranks span hosts: each collective is
// composed of pycomm's shared-memory collectives among the ranks of one host
// and an existing torch.distributed backend (gloo on CPU) between hosts.
//
// All-reduce, by size and layout (the same choice on every rank):
//  - "rs-ar-ag" (every host has L ranks, more than leader_max_bytes): the
//    intra-host reduce-scatter half of the ring; an all-reduce of each rank's
//    1/L shard among the ranks with the same local index on every host (the
//    `inter` group); the intra-host all-gather half. Each host moves 1/L of
//    the message over the network per rank, all L ranks at once. It runs in
//    pieces, pipelined: gloo reduces one piece while shared memory scatters the
//    next and gathers the one before.
//  - "leader" (small messages, or hosts with different rank counts): reduce to
//    the host's first rank, all-reduce among those leaders, broadcast.
// avg sums everywhere and divides by the group's size once, after the
// inter-host step. Every byte a rank ends with was computed once (by gloo,
// identically on every member, or by one host-local reduction) and then
// copied, so results are bitwise equal on every rank.
//
// all_gather and reduce_scatter go hierarchical the same way when every host
// has the same rank count (inter-host first for all_gather, last for
// reduce_scatter), broadcast always (root's host, leaders, other hosts), and
// reduce through the all-reduce. all_to_all, and all_gather/reduce_scatter on
// uneven hosts, run on the group-wide gloo fallback, queued in call order on
// pycomm's worker like everything else.
#pragma once

#include <string>
#include <vector>

#include "backend.h"

namespace pycomm {

// Which ranks of a group share a host. Hosts are ordered by their lowest
// rank; a host's ranks by their rank in the group (their local rank).
struct HostLayout {
  HostLayout(int rank, std::vector<std::vector<int>> hosts);
  int rank;
  std::vector<std::vector<int>> hosts;
  int host = 0;        // this rank's host
  int local_rank = 0;  // this rank's index on its host
  std::vector<int> host_of, local_of;  // by group rank
  bool uniform = true;  // every host has the same number of ranks

  int local_size() const { return int(hosts[size_t(host)].size()); }
  int world() const { return int(host_of.size()); }
};

class HierarchicalBackend : public Backend {
 public:
  // local: the communicator of this host's ranks. inter: a backend over the
  // ranks whose local index is this rank's, one per host that has one, in
  // host order (for local rank 0: every host's leader). fallback: a backend
  // over the whole group.
  HierarchicalBackend(HostLayout layout, std::shared_ptr<Communicator> local,
                      c10::intrusive_ptr<c10d::Backend> inter,
                      c10::intrusive_ptr<c10d::Backend> fallback, size_t leader_max_bytes,
                      size_t piece_bytes);

  // "leader" or "rs-ar-ag": the all-reduce a message of `count` elements of
  // `bytes` bytes gets on this layout.
  static const char* all_reduce_algorithm(bool uniform, int local_size, size_t count, size_t bytes,
                                          size_t leader_max_bytes);

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
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

 private:
  // The bodies of the jobs: each runs on the worker (or an idle caller), in
  // call order, on 1-D contiguous tensors.
  void all_reduce_now(const core::Context& ctx, const at::Tensor& t, const Reduction& red) const;
  void leader_all_reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op) const;
  void inter_all_reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op) const;
  void all_gather_now(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out) const;
  void reduce_scatter_now(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                          const Reduction& red) const;

  HostLayout layout_;
  c10::intrusive_ptr<c10d::Backend> inter_;
  size_t leader_max_bytes_;
  size_t piece_bytes_;  // rs-ar-ag runs in pieces of about this many bytes, pipelined
};

}  // namespace pycomm
