// The plan of a group on one host: each collective is one call into the core
// (csrc/core/collectives), over the communicator's shared memory.
#pragma once

#include "../core/tuning.h"
#include "plan.h"

namespace pycomm {

class HostPlan : public Plan {
 public:
  HostPlan(int world, const core::CommConfig& config);

  core::RouteQuery route_query() const override;
  void all_reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op,
                  core::Algorithm algorithm, bool restore) const override;
  void broadcast(const core::Context& ctx, const at::Tensor& t, int root) const override;
  void reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op, int root,
              core::Algorithm algorithm) const override;
  void all_gather(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                  core::Algorithm algorithm) const override;
  void reduce_scatter(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                      core::ReduceOp op, core::Algorithm algorithm) const override;
  void all_to_all(const core::Context& ctx, const Blocks& send, const Blocks& recv) const override;
  void barrier(const core::Context& ctx) const override;
  void gather(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
              int root) const override;
  void scatter(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
               int root) const override;

 private:
  int world_;
  size_t direct_max_bytes_;
};

}  // namespace pycomm
