// The plan of a group on one host: each collective is one call into the core
// (csrc/core/collectives), over the communicator's shared memory.
#pragma once

#include <vector>

#include "../core/tuning.h"
#include "plan.h"

namespace pycomm {

class HostPlan : public Plan {
 public:
  // numa_nodes: each rank's NUMA node (Communicator::numa_nodes; -1: not
  // pinned to one). Ranks pinned to two nodes or more make domains.
  // single_copy: whether the ranks read each other's memory
  // (Communicator::single_copy, agreed at set-up).
  HostPlan(int world, const core::CommConfig& config, const std::vector<int>& numa_nodes, bool single_copy);

  // two_shot (the routing table's, for a tensor in symmetric memory) in
  // place, in every rank's copy: step.symmetric.
  void all_reduce(const core::Context& ctx, const at::Tensor& t, const AllReduceStep& step) const override;
  void broadcast(const core::Context& ctx, const at::Tensor& t, int root, core::Algorithm algorithm) const override;
  void reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op, int root,
              core::Algorithm algorithm) const override;
  void all_gather(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                  core::Algorithm algorithm) const override;
  // Straight into each tensor, but for the ring (which writes one buffer).
  void all_gather_list(const core::Context& ctx, const at::Tensor& in, const std::vector<at::Tensor>& outs,
                       core::Algorithm algorithm) const override;
  void reduce_scatter(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                      core::ReduceOp op, core::Algorithm algorithm) const override;
  void all_to_all(const core::Context& ctx, const Blocks& send, const Blocks& recv) const override;
  void barrier(const core::Context& ctx) const override;
  void gather(const core::Context& ctx, const at::Tensor& in, const std::vector<at::Tensor>& outs, int root,
              core::Algorithm algorithm) const override;
  void scatter(const core::Context& ctx, const std::vector<at::Tensor>& ins, const at::Tensor& out, int root,
               core::Algorithm algorithm) const override;

 private:
  // Each rank's domain, numbered by lowest rank (core::AllReduceArgs::domain_of);
  // empty: one domain.
  std::vector<int> domain_of_;
};

}  // namespace pycomm
