// The plan of a group whose ranks span hosts: each collective is composed of
// pycomm's shared-memory collectives among the ranks of one host and an
// existing torch.distributed backend (gloo on CPU) between hosts. Which form
// each call takes is the routing table's answer (csrc/core/routing.h), which
// the front-end passes in; the host steps a form composes take the table's
// one-host rule for their own messages (core::host_algorithm):
//  - all_reduce "rs-ar-ag" (every host has L ranks, more than
//    hier_leader_max_bytes, at least L elements): the intra-host reduce-scatter
//    half of the ring; an all-reduce of each rank's 1/L shard among the ranks
//    with the same local index on every host (the `inter` backend); the
//    intra-host all-gather half. Each host moves 1/L of the message over the
//    network per rank, all L ranks at once. It runs in pieces, pipelined: gloo
//    reduces one piece while shared memory scatters the next and gathers the
//    one before.
//  - all_reduce "leader" (small messages, or hosts with different rank counts):
//    reduce to the host's first rank, all-reduce among those leaders, broadcast.
//  - all_gather, reduce_scatter "local-index" (equal hosts): inter-host first
//    for all_gather, last for reduce_scatter; on uneven hosts, and all_to_all
//    always, the group-wide gloo backend, called from pycomm's queue in call
//    order like everything else ("gloo").
//  - broadcast "root-host": the root's host, its leader to the other leaders,
//    each other host from its leader; reduce: an all-reduce on a copy.
// avg sums everywhere and divides by the group's size once, after the
// inter-host step. Every byte a rank ends with was computed once (by gloo,
// identically on every member, or by one host-local reduction) and then
// copied, so results are bitwise equal on every rank.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <vector>

#include "../core/tuning.h"
#include "plan.h"

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

class HierarchicalPlan : public Plan {
 public:
  // inter: a backend over the ranks whose local index is this rank's, one per
  // host that has one, in host order (for local rank 0: every host's leader).
  // group: a backend over the whole group (the front-end's fallback).
  HierarchicalPlan(HostLayout layout, c10::intrusive_ptr<c10d::Backend> inter,
                   c10::intrusive_ptr<c10d::Backend> group, const core::CommConfig& config);

  const HostLayout& layout() const { return layout_; }

  // `restore` does not apply: a failed inter-host step aborts the session of
  // every host (fail_remote), so no rank goes on with the tensor.
  void all_reduce(const core::Context& ctx, const at::Tensor& t, const AllReduceStep& step) const override;
  // (One form across hosts: `algorithm` is the table's root-host.)
  void broadcast(const core::Context& ctx, const at::Tensor& t, int root, core::Algorithm algorithm) const override;
  void reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op, int root,
              core::Algorithm algorithm) const override;
  void all_gather(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                  core::Algorithm algorithm) const override;
  void reduce_scatter(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                      core::ReduceOp op, core::Algorithm algorithm) const override;
  void all_to_all(const core::Context& ctx, const Blocks& send, const Blocks& recv) const override;
  void barrier(const core::Context& ctx) const override;

 private:
  // The one-host rule for a host step of `bytes_per_rank` (core::host_algorithm).
  core::Algorithm host_step(size_t bytes_per_rank) const;
  void rs_ar_ag(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op) const;
  void leader_all_reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op) const;
  void inter_all_reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op) const;

  HostLayout layout_;
  c10::intrusive_ptr<c10d::Backend> inter_, group_;
  core::HierarchyTuning tuning_;
  size_t direct_max_bytes_;  // the host steps' (CollectiveTuning::direct_max_bytes)
};

}  // namespace pycomm
