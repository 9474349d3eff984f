// A plan: how the collectives of one c10d backend move their bytes, once the
// front-end (frontend.h) has checked the call, asked the routing table
// (csrc/core/routing.h) how it runs, packed its lists into flat buffers and
// applied premul_sum's factor. Every method runs on the communicator's worker
// (or an idle caller), in call order, on 1-D contiguous CPU tensors of one
// dtype, and is called the same way on every rank. Where the table's answer
// decides something, the method takes its algorithm and runs it: a plan never
// asks the table again.
//
// Plans: HostPlan (host_plan.h: one core collective over this host's shared
// memory) and HierarchicalPlan (hierarchical_plan.h: shared memory inside each
// host, another backend between hosts). CUDA tensors take the CUDA path
// (cuda_path.h), which makes jobs of its own on a device stream; what pycomm
// does not run goes to the fallback backend (the table's other plans).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "../core/collectives/collectives.h"
#include "../core/routing.h"
#include "staged_tensor.h"
#include "symmetric_place.h"

namespace pycomm {

// One tensor's all-reduce as the front-end decided it, once (all_reduce_call.h):
// a plan runs it as it is.
struct AllReduceStep {
  core::ReduceOp op = core::ReduceOp::kSum;
  core::DType dtype = core::DType::kFloat32;  // the tensor's (complex: its real component's)
  core::Algorithm algorithm = core::Algorithm::kDirect;  // the routing table's
  // Put the tensor back if the collective fails part way, where a failure can
  // leave it half written and the rest of the group usable (one host's shared
  // memory).
  bool restore = false;
  // The tensor lies in the group's symmetric memory (the table's two_shot on
  // one host reduces it there, in every rank's copy); peers empty otherwise.
  SymmetricPlace symmetric;
};

// The core's arguments of `step` over `t` (1-D, contiguous, real), for the
// host plan and the CUDA path alike; what only one of them runs (NUMA
// domains, the symmetric place) is theirs to add.
inline core::AllReduceArgs all_reduce_args(const AllReduceStep& step, const at::Tensor& t) {
  core::AllReduceArgs a;
  a.dtype = step.dtype;
  a.data = t.data_ptr();
  a.count = size_t(t.numel());
  a.op = step.op;
  a.algorithm = step.algorithm;
  a.restore = step.restore;
  return a;
}

// all_to_all's blocks where the caller's tensors hold them: block r is
// counts[r] elements at data[r], inside `tensors` (all_to_all_single's one
// tensor, or the list form's one per rank), which the job keeps alive. The
// host plan uses the pointers as they are: no tensor op on the call's path.
struct Blocks {
  std::vector<at::Tensor> tensors;
  std::vector<void*> data;
  std::vector<int64_t> counts;
};

class Plan {
 public:
  virtual ~Plan() = default;

  // The layout part of a route query (hosts, uniform, local_size, NUMA
  // domains, single copy) and the plan's thresholds, stated once when the
  // plan is made; the front-end adds the call's own fields.
  const core::RouteQuery& route_query() const { return route_query_; }

  // In place: `t` ends as the reduction of every rank's `t`.
  virtual void all_reduce(const core::Context& ctx, const at::Tensor& t, const AllReduceStep& step) const = 0;
  // `root` is a rank of the group.
  virtual void broadcast(const core::Context& ctx, const at::Tensor& t, int root,
                         core::Algorithm algorithm) const = 0;
  // The root's `t` ends as the reduction; the other ranks' `t` is not written.
  virtual void reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op, int root,
                      core::Algorithm algorithm) const = 0;
  // `out` holds world x `in`, in rank order; `in` is not written.
  virtual void all_gather(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                          core::Algorithm algorithm) const = 0;
  // The list form: outs[r] receives rank r's `in`. By default gathered into
  // one buffer, then copied out; a plan may write each straight.
  virtual void all_gather_list(const core::Context& ctx, const at::Tensor& in, const std::vector<at::Tensor>& outs,
                               core::Algorithm algorithm) const;
  // `in` holds world x `out`; `out` ends as the reduction of every rank's
  // chunk of this rank; `in` may be written (it is the front-end's own copy
  // when premul_sum scaled it, else the caller's, which no plan writes).
  virtual void reduce_scatter(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                              core::ReduceOp op, core::Algorithm algorithm) const = 0;
  // send block r goes to rank r, which receives it into its recv block of this rank.
  virtual void all_to_all(const core::Context& ctx, const Blocks& send, const Blocks& recv) const = 0;
  virtual void barrier(const core::Context& ctx) const = 0;
  // One host's (the routing table sends them to the fallback across hosts,
  // so only the host plan runs them). gather: the root's outs[r] ends as rank
  // r's `in`; `outs` is empty on the other ranks.
  virtual void gather(const core::Context& ctx, const at::Tensor& in, const std::vector<at::Tensor>& outs,
                      int root, core::Algorithm algorithm) const;
  // scatter: rank r's `out` ends as the root's ins[r]; `ins` is empty on the
  // other ranks.
  virtual void scatter(const core::Context& ctx, const std::vector<at::Tensor>& ins, const at::Tensor& out,
                       int root, core::Algorithm algorithm) const;

 protected:
  core::RouteQuery route_query_;  // set by each plan's constructor
};

inline void Plan::all_gather_list(const core::Context& ctx, const at::Tensor& in,
                                  const std::vector<at::Tensor>& outs, core::Algorithm algorithm) const {
  const int64_t n = in.numel();
  const at::Tensor gathered = at::empty({n * int64_t(outs.size())}, in.options());
  all_gather(ctx, in, gathered, algorithm);
  for (size_t r = 0; r < outs.size(); ++r) copy_bits(outs[r], gathered.narrow(0, int64_t(r) * n, n));
}
inline void Plan::gather(const core::Context&, const at::Tensor&, const std::vector<at::Tensor>&, int,
                         core::Algorithm) const {
  TORCH_CHECK(false, "gather: the routing table sent it to a plan that does not run it");
}
inline void Plan::scatter(const core::Context&, const std::vector<at::Tensor>&, const at::Tensor&, int,
                          core::Algorithm) const {
  TORCH_CHECK(false, "scatter: the routing table sent it to a plan that does not run it");
}

}  // namespace pycomm
