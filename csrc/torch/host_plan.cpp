#include "host_plan.h"

#include <algorithm>

#include "dtype_map.h"

namespace pycomm {

HostPlan::HostPlan(int world, const core::CommConfig& config, const std::vector<int>& numa_nodes,
                   bool single_copy) {
  core::RouteQuery& q = route_query_;
  q.local_size = world;
  q.direct_max_bytes = config.tuning.direct_max_bytes;
  q.two_level_min_bytes = config.tuning.two_level_min_bytes;
  q.single_copy = single_copy;
  q.single_copy_min_bytes = config.tuning.single_copy_min_bytes;
  q.single_copy_rooted_max_bytes = config.tuning.single_copy_rooted_max_bytes;
  TORCH_CHECK_VALUE(core::parse_two_level(config.tuning.two_level, &q.two_level), "two_level: expected auto, "
                    "on or off, got '", config.tuning.two_level, "'");
  // Domains only where every rank is pinned to one node: an unpinned rank
  // runs, and its memory lies, wherever the kernel put it.
  if (int(numa_nodes.size()) != world) return;
  std::vector<int> seen;  // nodes, in order of their lowest rank
  std::vector<int> of;
  for (int node : numa_nodes) {
    if (node < 0) return;
    auto it = std::find(seen.begin(), seen.end(), node);
    of.push_back(int(it - seen.begin()));
    if (it == seen.end()) seen.push_back(node);
  }
  if (seen.size() < 2) return;
  q.domains = int(seen.size());
  q.smallest_domain = world;
  for (int d = 0; d < q.domains; ++d) {
    q.smallest_domain = std::min(q.smallest_domain, int(std::count(of.begin(), of.end(), d)));
  }
  domain_of_ = std::move(of);
}

// c10d's collectives never put a failed call's tensor back (DDP drops a failed
// step's buckets): no backup copy (restore = false) on any of them but the
// all-reduce that pycomm.all_reduce asks to restore.

void HostPlan::all_reduce(const core::Context& ctx, const at::Tensor& t, const AllReduceStep& step) const {
  core::AllReduceArgs a = all_reduce_args(step, t);
  if (!domain_of_.empty()) a.domain_of = domain_of_.data();
  // Every rank passes its copy (the fingerprint checks the place).
  if (step.algorithm == core::Algorithm::kTwoShot && !step.symmetric.peers.empty()) {
    a.peers = step.symmetric.peers.data();
    a.place = step.symmetric.place;
  }
  core::all_reduce(ctx, a);
}

void HostPlan::broadcast(const core::Context& ctx, const at::Tensor& t, int root,
                         core::Algorithm algorithm) const {
  core::BroadcastArgs a;
  a.algorithm = algorithm;
  a.dtype = dtype_of(t);
  a.data = t.data_ptr();
  a.count = size_t(t.numel());
  a.root = root;
  a.restore = false;
  core::broadcast(ctx, a);
}

void HostPlan::reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op, int root,
                      core::Algorithm) const {  // one host's reduce has one algorithm (direct)
  core::ReduceArgs a;
  a.dtype = dtype_of(t);
  a.data = t.data_ptr();
  a.count = size_t(t.numel());
  a.op = op;
  a.root = root;
  a.restore = false;
  core::reduce(ctx, a);
}

void HostPlan::all_gather(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                          core::Algorithm algorithm) const {
  core::AllGatherArgs a;
  a.algorithm = algorithm;
  a.dtype = dtype_of(in);
  a.input = in.data_ptr();
  a.output = out.data_ptr();
  a.count = size_t(in.numel());
  core::all_gather(ctx, a);
}

void HostPlan::all_gather_list(const core::Context& ctx, const at::Tensor& in,
                               const std::vector<at::Tensor>& outs, core::Algorithm algorithm) const {
  if (algorithm == core::Algorithm::kRing) return Plan::all_gather_list(ctx, in, outs, algorithm);
  std::vector<void*> where(outs.size());
  for (size_t r = 0; r < outs.size(); ++r) where[r] = outs[r].data_ptr();
  core::AllGatherArgs a;
  a.algorithm = algorithm;
  a.dtype = dtype_of(in);
  a.input = in.data_ptr();
  a.outputs = where.data();
  a.count = size_t(in.numel());
  core::all_gather(ctx, a);
}

void HostPlan::reduce_scatter(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                              core::ReduceOp op, core::Algorithm algorithm) const {
  core::ReduceScatterArgs a;
  a.algorithm = algorithm;
  a.dtype = dtype_of(out);
  a.input = in.data_ptr();
  a.output = out.data_ptr();
  a.count = size_t(out.numel());
  a.op = op;
  core::reduce_scatter(ctx, a);
}

void HostPlan::all_to_all(const core::Context& ctx, const Blocks& send, const Blocks& recv) const {
  const std::vector<const void*> sp(send.data.begin(), send.data.end());
  const std::vector<size_t> sc(send.counts.begin(), send.counts.end());
  const std::vector<size_t> rc(recv.counts.begin(), recv.counts.end());
  core::AllToAllArgs a;
  a.send = sp.data();
  a.send_counts = sc.data();
  a.recv = recv.data.data();
  a.recv_counts = rc.data();
  a.dtype = dtype_of(send.tensors.at(0));
  core::all_to_all(ctx, a);
}

void HostPlan::barrier(const core::Context& ctx) const { core::barrier(ctx); }

void HostPlan::gather(const core::Context& ctx, const at::Tensor& in, const std::vector<at::Tensor>& outs,
                      int root, core::Algorithm algorithm) const {
  std::vector<void*> where(outs.size());
  for (size_t r = 0; r < outs.size(); ++r) where[r] = outs[r].data_ptr();
  core::GatherArgs a;
  a.algorithm = algorithm;
  a.dtype = dtype_of(in);
  a.input = in.data_ptr();
  a.outputs = where.empty() ? nullptr : where.data();
  a.count = size_t(in.numel());
  a.root = root;
  core::gather(ctx, a);
}

void HostPlan::scatter(const core::Context& ctx, const std::vector<at::Tensor>& ins, const at::Tensor& out,
                       int root, core::Algorithm algorithm) const {
  std::vector<const void*> where(ins.size());
  for (size_t r = 0; r < ins.size(); ++r) where[r] = ins[r].data_ptr();
  core::ScatterArgs a;
  a.algorithm = algorithm;
  a.dtype = dtype_of(out);
  a.inputs = where.empty() ? nullptr : where.data();
  a.output = out.data_ptr();
  a.count = size_t(out.numel());
  a.root = root;
  core::scatter(ctx, a);
}

}  // namespace pycomm
