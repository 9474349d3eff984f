// FrontEnd's collectives but the all-reduce (frontend_all_reduce.cpp):
// broadcast, reduce, all_gather, reduce_scatter, all_to_all, barrier, and on
// one host gather and scatter. Each asks the routing table once, hands what
// pycomm does not run to the fallback, checks its arguments, and queues a job
// that gives the plan flat tensors and the table's algorithm.
#include <c10/util/Exception.h>

#include "../core/checked_size.h"
#include "frontend.h"
#include "staged_tensor.h"
#include "tensor_checks.h"

namespace pycomm {
namespace {

using Use = StagedTensor::Use;

// all_to_all_single's blocks of the staged tensor `s`: by split sizes in rows
// of dim 0, or (none given) equal blocks of whole rows. Counts are in the
// plan's elements (a complex element is two reals). The sizes are the
// caller's: their sum and each block's elements are checked, since sizes near
// 2^63 would wrap to a sum equal to the tensor's rows, and blocks that reach
// far past its end.
Blocks blocks_of(const StagedTensor& s, const std::vector<int64_t>& splits, int world, const char* arg) {
  const at::Tensor& t = s.user();
  Blocks b;
  b.tensors = {s.flat()};
  b.counts.resize(static_cast<size_t>(world));
  const int64_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : t.numel() / t.size(0);
  if (splits.empty()) {
    // As torch documents it (and gloo checks it).
    TORCH_CHECK_VALUE(t.dim() > 0, arg, ": a 0-d tensor has no dim 0 to split over ", world, " ranks");
    TORCH_CHECK_VALUE(t.size(0) % world == 0, arg, ": dim 0 of size ", t.size(0),
                      " does not split evenly over ", world, " ranks");
    for (auto& c : b.counts) c = t.size(0) / world * row;
  } else {
    TORCH_CHECK_VALUE(int64_t(splits.size()) == world, arg, "_split_sizes: expected ", world,
                      " sizes (the world size), got ", splits.size());
    const std::string what = std::string(arg) + "_split_sizes";
    int64_t rows = 0;
    for (int r = 0; r < world; ++r) {
      TORCH_CHECK_VALUE(splits[size_t(r)] >= 0, arg, "_split_sizes: negative size ", splits[size_t(r)]);
      rows = core::checked_add(rows, splits[size_t(r)], what.c_str());
      b.counts[size_t(r)] = core::checked_mul(splits[size_t(r)], row, what.c_str());
    }
    TORCH_CHECK_VALUE(t.dim() > 0 && rows == t.size(0), arg, "_split_sizes: they add up to ", rows,
                      " rows, the tensor has ", t.dim() > 0 ? t.size(0) : 0);
  }
  const int64_t lanes = t.is_complex() ? 2 : 1;
  char* base = static_cast<char*>(s.flat().data_ptr());
  int64_t offset = 0;
  for (int64_t& c : b.counts) {
    b.data.push_back(base + offset * int64_t(t.element_size()));
    offset += c;
    c *= lanes;
  }
  return b;
}

// The list form's blocks: one tensor each.
Blocks blocks_of(const std::vector<StagedTensor>& ts) {
  Blocks b;
  for (const auto& s : ts) {
    b.tensors.push_back(s.flat());
    b.data.push_back(s.flat().data_ptr());
    b.counts.push_back(s.flat().numel());
  }
  return b;
}

void check_root(int64_t root, int size, const char* arg) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, arg, ": rank ", root, " is not in this group of ", size);
}

// gather's and scatter's list (`arg`), which c10d passes on the root (the
// `role` rank, `root_arg`=root) as one list of `world` tensors, and elsewhere
// as no list or an empty one. The root's list; empty elsewhere.
std::vector<at::Tensor> root_list(const std::vector<std::vector<at::Tensor>>& lists, bool is_root, int root,
                                  int world, const char* arg, const char* role, const char* root_arg) {
  if (!is_root) {
    TORCH_CHECK_VALUE(lists.empty() || (lists.size() == 1 && lists[0].empty()), arg, ": only the ", role,
                      " rank (", root_arg, "=", root, ") takes one");
    return {};
  }
  TORCH_CHECK_VALUE(lists.size() == 1, arg, ": expected one list on the ", role, " rank");
  TORCH_CHECK_VALUE(int64_t(lists[0].size()) == world, arg, ": expected ", world,
                    " tensors (the world size), got ", lists[0].size());
  return lists[0];
}

}  // namespace

// ---------------------------------------------------------------- broadcast, reduce

c10::intrusive_ptr<c10d::Work> FrontEnd::broadcast(std::vector<at::Tensor>& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  const core::PartTimer timed = enter();
  const core::Route route = route_of(query(core::Collective::kBroadcast, where_of(tensors), Reduction()),
                                     tensors.empty() ? at::Tensor() : tensors[0]);
  if (route.plan == core::PlanKind::kFallback) return fallback().broadcast(tensors, opts);
  const at::Tensor& t = single_tensor(tensors, "tensor");
  check_tensor(t, "tensor");
  check_root(opts.rootRank, getSize(), "src");
  const bool is_root = opts.rootRank == getRank();
  if (!is_root) check_writable(t, "tensor");
  Job job;
  job.outputs = tensors;
  job.body = [plan = plan_, s = StagedTensor(t, is_root ? Use::kIn : Use::kOut), root = int(opts.rootRank),
              algorithm = route.algorithm](const core::Context& ctx) {
    s.copy_in();
    plan->broadcast(ctx, s.flat(), root, algorithm);
    s.copy_out();
  };
  return launch(c10d::OpType::BROADCAST, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::reduce(std::vector<at::Tensor>& tensors,
                                               const c10d::ReduceOptions& opts) {
  const core::PartTimer timed = enter();
  const Reduction red = Reduction::of(opts.reduceOp);
  const core::Route route = route_of(query(core::Collective::kReduce, where_of(tensors), red),
                                     tensors.empty() ? at::Tensor() : tensors[0]);
  if (route.plan == core::PlanKind::kFallback) return fallback().reduce(tensors, opts);
  const at::Tensor& t = single_tensor(tensors, "tensor");
  check_tensor(t, "tensor");
  check_op_for_dtype(red.op, red.premul, t.scalar_type(), "tensor");
  check_root(opts.rootRank, getSize(), "dst");
  const int root = int(opts.rootRank);
  if (root == getRank()) check_writable(t, "tensor");
  Job job;
  job.outputs = tensors;
  job.body = [plan = plan_, s = StagedTensor(t, root == getRank() ? Use::kInOut : Use::kIn), red,
              root, rank = getRank(), algorithm = route.algorithm](const core::Context& ctx) {
    s.copy_in();
    // The root's tensor is the output; the others' are not to be written
    // (a staging buffer is pycomm's own).
    const at::Tensor& t = s.flat();
    const at::Tensor in = !red.premul                     ? t
                          : root == rank || s.staged() ? t.mul_(red.factor)
                                                          : t.mul(red.factor);
    plan->reduce(ctx, in, red.op, root, algorithm);
    s.copy_out();
  };
  return launch(c10d::OpType::REDUCE, std::move(job), opts.asyncOp);
}

// ---------------------------------------------------------------- all_gather

c10::intrusive_ptr<c10d::Work> FrontEnd::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  const core::PartTimer timed = enter();
  const core::Route route =
      route_of(query(core::Collective::kAllGather, where_of(output, input), Reduction()), input);
  if (route.plan == core::PlanKind::kFallback) return fallback()._allgather_base(output, input, opts);
  std::vector<at::Tensor> outs{output}, ins{input};
  return all_gather_tensors(outs, ins, {route.algorithm}, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const core::PartTimer timed = enter();
  const core::RouteQuery q = query(core::Collective::kAllGather, where_of(outputs, inputs), Reduction());
  const core::Route route = route_of(q, inputs.empty() ? at::Tensor() : inputs[0]);
  if (route.plan == core::PlanKind::kFallback) {
    return fallback().allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  return all_gather_tensors(outputs, inputs, algorithms_of(q, route, inputs), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::all_gather_tensors(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           std::vector<core::Algorithm> algorithms,
                                                           bool async_op) {
  check_all_gather_pairs(outputs, inputs, getSize());
  Job job;
  job.outputs = outputs;
  job.body = [plan = plan_, ins = staged_each(inputs, Use::kIn), outs = staged_each(outputs, Use::kOut),
              algorithms = std::move(algorithms)](const core::Context& ctx) {
    copy_in(ins);
    for (size_t i = 0; i < ins.size(); ++i) {
      plan->all_gather(ctx, ins[i].flat(), outs[i].flat(), algorithms[i]);
    }
    copy_out(outs);
  };
  return launch(c10d::OpType::_ALLGATHER_BASE, std::move(job), async_op);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  const core::PartTimer timed = enter();
  const core::Route route =
      route_of(query(core::Collective::kAllGather, where_of(outputs, inputs), Reduction()),
               inputs.empty() ? at::Tensor() : inputs[0]);
  if (route.plan == core::PlanKind::kFallback) return fallback().allgather(outputs, inputs, opts);
  single_tensor(inputs, "input_tensor");
  TORCH_CHECK_VALUE(outputs.size() == 1, "tensor_list: expected one list (one device per rank)");
  return all_gather_lists(outputs, inputs, {route.algorithm}, c10d::OpType::ALLGATHER, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const core::PartTimer timed = enter();
  const core::RouteQuery q = query(core::Collective::kAllGather, where_of(outputs, inputs), Reduction());
  const core::Route route = route_of(q, inputs.empty() ? at::Tensor() : inputs[0]);
  if (route.plan == core::PlanKind::kFallback) return fallback().allgather_coalesced(outputs, inputs, opts);
  // c10d's layout (dist.all_gather_coalesced): one list per rank, each with
  // one tensor per input. The lists by input are allgather's.
  TORCH_CHECK_VALUE(int64_t(outputs.size()) == getSize(), "output_tensor_lists: expected ",
                    getSize(), " lists (one per rank), got ", outputs.size());
  std::vector<std::vector<at::Tensor>> by_input(inputs.size());
  for (size_t r = 0; r < outputs.size(); ++r) {
    TORCH_CHECK_VALUE(outputs[r].size() == inputs.size(), "output_tensor_lists[", r, "]: expected ",
                      inputs.size(), " tensors (one per input), got ", outputs[r].size());
    for (size_t i = 0; i < inputs.size(); ++i) by_input[i].push_back(outputs[r][i]);
  }
  return all_gather_lists(by_input, inputs, algorithms_of(q, route, inputs), c10d::OpType::ALLGATHER_COALESCED,
                          opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::all_gather_lists(
    const std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    std::vector<core::Algorithm> algorithms, c10d::OpType type, bool async_op) {
  check_all_gather_lists(outputs, inputs, getSize());
  std::vector<at::Tensor> all_outputs;
  std::vector<std::vector<StagedTensor>> outs;
  for (const auto& list : outputs) {
    all_outputs.insert(all_outputs.end(), list.begin(), list.end());
    outs.push_back(staged_each(list, Use::kOut));
  }
  Job job;
  job.outputs = all_outputs;
  job.body = [plan = plan_, ins = staged_each(inputs, Use::kIn), outs,
              algorithms = std::move(algorithms)](const core::Context& ctx) {
    copy_in(ins);
    for (size_t i = 0; i < ins.size(); ++i) {
      plan->all_gather_list(ctx, ins[i].flat(), flats_of(outs[i]), algorithms[i]);
      copy_out(outs[i]);
    }
  };
  return launch(type, std::move(job), async_op);
}

// ---------------------------------------------------------------- reduce_scatter

c10::intrusive_ptr<c10d::Work> FrontEnd::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::ReduceScatterOptions& opts) {
  const core::PartTimer timed = enter();
  const Reduction red = Reduction::of(opts.reduceOp);
  const core::Route route =
      route_of(query(core::Collective::kReduceScatter, where_of(output, input), red), input);
  if (route.plan == core::PlanKind::kFallback) return fallback()._reduce_scatter_base(output, input, opts);
  std::vector<at::Tensor> outs{output}, ins{input};
  return reduce_scatter_tensors(outs, ins, red, {route.algorithm}, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const core::PartTimer timed = enter();
  const Reduction red = Reduction::of(opts.reduceOp);
  const core::RouteQuery q = query(core::Collective::kReduceScatter, where_of(outputs, inputs), red);
  const core::Route route = route_of(q, inputs.empty() ? at::Tensor() : inputs[0]);
  if (route.plan == core::PlanKind::kFallback) {
    return fallback().reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  return reduce_scatter_tensors(outputs, inputs, red, algorithms_of(q, route, inputs), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::reduce_scatter_tensors(std::vector<at::Tensor>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const Reduction& red,
                                                               std::vector<core::Algorithm> algorithms,
                                                               bool async_op) {
  check_reduce_scatter_pairs(outputs, inputs, getSize(), red.op, red.premul);
  Job job;
  job.outputs = outputs;
  job.body = [plan = plan_, ins = staged_each(inputs, Use::kIn), outs = staged_each(outputs, Use::kOut),
              red, algorithms = std::move(algorithms)](const core::Context& ctx) {
    copy_in(ins);
    for (size_t i = 0; i < ins.size(); ++i) {
      // The input is not ours to scale in place.
      const at::Tensor& in = ins[i].flat();
      plan->reduce_scatter(ctx, red.premul ? in.mul(red.factor) : in, outs[i].flat(), red.op,
                           algorithms[i]);
    }
    copy_out(outs);
  };
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE, std::move(job), async_op);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  const core::PartTimer timed = enter();
  const Reduction red = Reduction::of(opts.reduceOp);
  // The input is the list concatenated: world x the output.
  const core::Route route = route_of(query(core::Collective::kReduceScatter, where_of(outputs, inputs), red),
                                     outputs.empty() ? at::Tensor() : outputs[0], getSize());
  if (route.plan == core::PlanKind::kFallback) return fallback().reduce_scatter(outputs, inputs, opts);
  check_reduce_scatter_list(outputs, inputs, getSize(), red.op, red.premul);
  Job job;
  job.outputs = outputs;
  job.body = [plan = plan_, out = StagedTensor(outputs[0], Use::kOut), list = staged_each(inputs[0], Use::kIn),
              red, algorithm = route.algorithm](const core::Context& ctx) {
    // The list form reduces from one buffer: the inputs, concatenated here on
    // the worker, in call order (an earlier queued collective may write them).
    copy_in(list);
    at::Tensor in = at::cat(flats_of(list));
    if (red.premul) in.mul_(red.factor);
    plan->reduce_scatter(ctx, in, out.flat(), red.op, algorithm);
    out.copy_out();
  };
  return launch(c10d::OpType::REDUCE_SCATTER, std::move(job), opts.asyncOp);
}

// ---------------------------------------------------------------- all_to_all, barrier

c10::intrusive_ptr<c10d::Work> FrontEnd::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_split_sizes,
                                                      std::vector<int64_t>& input_split_sizes,
                                                      const c10d::AllToAllOptions& opts) {
  const core::PartTimer timed = enter();
  if (plan_of(core::Collective::kAllToAll, where_of(output, input)) == core::PlanKind::kFallback) {
    return fallback().alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
  }
  check_all_to_all_single(output, input);
  std::vector<StagedTensor> ins{StagedTensor(input, Use::kIn)}, outs{StagedTensor(output, Use::kOut)};
  // The input's splits are checked first, on every compiler.
  Blocks send = blocks_of(ins[0], input_split_sizes, getSize(), "input");
  Blocks recv = blocks_of(outs[0], output_split_sizes, getSize(), "output");
  return all_to_all(c10d::OpType::ALLTOALL_BASE, {output}, std::move(send), std::move(recv),
                    std::move(ins), std::move(outs), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::alltoall(std::vector<at::Tensor>& outputs,
                                                 std::vector<at::Tensor>& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  const core::PartTimer timed = enter();
  if (plan_of(core::Collective::kAllToAll, where_of(outputs, inputs)) == core::PlanKind::kFallback) {
    return fallback().alltoall(outputs, inputs, opts);
  }
  check_all_to_all_lists(outputs, inputs, getSize());
  std::vector<StagedTensor> ins = staged_each(inputs, Use::kIn), outs = staged_each(outputs, Use::kOut);
  Blocks send = blocks_of(ins), recv = blocks_of(outs);
  return all_to_all(c10d::OpType::ALLTOALL, outputs, std::move(send), std::move(recv),
                    std::move(ins), std::move(outs), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::all_to_all(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                   Blocks send, Blocks recv,
                                                   std::vector<StagedTensor> ins,
                                                   std::vector<StagedTensor> outs, bool async_op) {
  Job job;
  job.outputs = std::move(outputs);
  job.body = [plan = plan_, send = std::move(send), recv = std::move(recv), ins = std::move(ins),
              outs = std::move(outs)](const core::Context& ctx) {
    copy_in(ins);
    plan->all_to_all(ctx, send, recv);
    copy_out(outs);
  };
  return launch(type, std::move(job), async_op);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::barrier(const c10d::BarrierOptions& opts) {
  const core::PartTimer timed = enter();
  Job job;
  job.body = [plan = plan_](const core::Context& ctx) { plan->barrier(ctx); };
  return launch(c10d::OpType::BARRIER, std::move(job), opts.asyncOp);
}

// ---------------------------------------------------------------- gather, scatter (one host)

c10::intrusive_ptr<c10d::Work> FrontEnd::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs,
                                               const c10d::GatherOptions& opts) {
  const core::PartTimer timed = enter();
  const core::Route route = route_of(query(core::Collective::kGather, where_of(outputs, inputs), Reduction()),
                                     inputs.empty() ? at::Tensor() : inputs[0]);
  if (route.plan == core::PlanKind::kFallback) return fallback().gather(outputs, inputs, opts);
  const at::Tensor& in = single_tensor(inputs, "tensor");
  check_tensor(in, "tensor");
  check_root(opts.rootRank, getSize(), "dst");
  const int root = int(opts.rootRank);
  const bool is_root = root == getRank();
  const std::vector<at::Tensor> list =
      root_list(outputs, is_root, root, getSize(), "gather_list", "destination", "dst");
  for (const auto& o : list) {
    check_like(o, "gather_list[i]", in.scalar_type(), in.numel(), "tensor");
    check_writable(o, "gather_list[i]");
  }
  Job job;
  job.outputs = list;
  job.body = [plan = plan_, in = StagedTensor(in, Use::kIn), outs = staged_each(list, Use::kOut), root,
              algorithm = route.algorithm](const core::Context& ctx) {
    in.copy_in();
    plan->gather(ctx, in.flat(), flats_of(outs), root, algorithm);
    copy_out(outs);
  };
  return launch(c10d::OpType::GATHER, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ScatterOptions& opts) {
  const core::PartTimer timed = enter();
  const core::Route route = route_of(query(core::Collective::kScatter, where_of(outputs, inputs), Reduction()),
                                     outputs.empty() ? at::Tensor() : outputs[0]);
  if (route.plan == core::PlanKind::kFallback) return fallback().scatter(outputs, inputs, opts);
  const at::Tensor& out = single_tensor(outputs, "tensor");
  check_tensor(out, "tensor");
  check_writable(out, "tensor");
  check_root(opts.rootRank, getSize(), "src");
  const int root = int(opts.rootRank);
  const std::vector<at::Tensor> list =
      root_list(inputs, root == getRank(), root, getSize(), "scatter_list", "source", "src");
  for (const auto& t : list) check_like(t, "scatter_list[i]", out.scalar_type(), out.numel(), "tensor");
  Job job;
  job.outputs = outputs;
  job.body = [plan = plan_, out = StagedTensor(out, Use::kOut), list = staged_each(list, Use::kIn), root,
              algorithm = route.algorithm](const core::Context& ctx) {
    copy_in(list);
    plan->scatter(ctx, flats_of(list), out.flat(), root, algorithm);
    out.copy_out();
  };
  return launch(c10d::OpType::SCATTER, std::move(job), opts.asyncOp);
}

}  // namespace pycomm
