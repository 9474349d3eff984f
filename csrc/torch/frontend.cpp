#include "frontend.h"

#include <c10/util/Exception.h>

#include "cuda_path.h"
#include "dtype_map.h"
#include "tensor_checks.h"
#include "torch_compat.h"

namespace pycomm {
namespace {

// c10d's view of one queued job: wait() rethrows pycomm's typed error
// (CommTimeout, CollectiveMismatch), the future holds the output tensors.
class Work : public c10d::Work {
 public:
  Work(int rank, c10d::OpType type, std::shared_ptr<WorkItem> item)
      : c10d::Work(rank, type), item_(std::move(item)) {}

  bool isCompleted() override { return item_->completed(); }
  bool isSuccess() const override { return item_->completed() && !item_->error(); }
  std::exception_ptr exception() const override { return item_->error(); }
  // pycomm's own deadline bounds every wait; c10d's timeout adds nothing.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    item_->wait();
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return item_->future; }
  std::vector<at::Tensor> result() override { return item_->job.outputs; }

 private:
  std::shared_ptr<WorkItem> item_;
};

void note(Backend::Where& w, const at::Tensor& t) {
  if (!t.defined()) return;
  w.cuda |= t.is_cuda();
  w.sparse |= t.layout() != at::kStrided;
}
void note(Backend::Where& w, const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts) note(w, t);
}
void note(Backend::Where& w, const std::vector<std::vector<at::Tensor>>& lists) {
  for (const auto& l : lists) note(w, l);
}
template <typename... Args>
Backend::Where where_of(const Args&... args) {
  Backend::Where w;
  (note(w, args), ...);
  return w;
}

// The 1-D view of a contiguous tensor: the shape every plan works on. A 1-D
// tensor (DDP's buckets) is its own: a view is an op through torch's
// dispatcher, microseconds on a small message's path.
at::Tensor flat(const at::Tensor& t) { return t.dim() == 1 ? t : t.reshape({-1}); }

std::vector<at::Tensor> flat_each(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(flat(t));
  return out;
}

// all_to_all_single's blocks of `t`: by split sizes in rows of dim 0, or
// (none given) equal blocks of whole rows.
Blocks blocks_of(const at::Tensor& t, const std::vector<int64_t>& splits, int world, const char* arg) {
  Blocks b;
  b.tensors = {t};
  b.counts.resize(static_cast<size_t>(world));
  const int64_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : t.numel() / t.size(0);
  if (splits.empty()) {
    // As torch documents it (and gloo checks it).
    TORCH_CHECK_VALUE(t.dim() > 0 && t.size(0) % world == 0, arg, ": dim 0 of size ",
                      t.dim() > 0 ? t.size(0) : 0, " does not split evenly over ", world, " ranks");
    for (auto& c : b.counts) c = t.size(0) / world * row;
  } else {
    TORCH_CHECK_VALUE(int64_t(splits.size()) == world, arg, "_split_sizes: expected ", world,
                      " sizes (the world size), got ", splits.size());
    int64_t rows = 0;
    for (int r = 0; r < world; ++r) {
      TORCH_CHECK_VALUE(splits[size_t(r)] >= 0, arg, "_split_sizes: negative size ", splits[size_t(r)]);
      rows += splits[size_t(r)];
      b.counts[size_t(r)] = splits[size_t(r)] * row;
    }
    TORCH_CHECK_VALUE(t.dim() > 0 && rows == t.size(0), arg, "_split_sizes: they add up to ", rows,
                      " rows, the tensor has ", t.dim() > 0 ? t.size(0) : 0);
  }
  char* base = static_cast<char*>(t.data_ptr());
  int64_t offset = 0;
  for (int64_t c : b.counts) {
    b.data.push_back(base + offset * int64_t(t.element_size()));
    offset += c;
  }
  return b;
}

// The list form's blocks: one tensor each.
Blocks blocks_of(const std::vector<at::Tensor>& ts) {
  Blocks b;
  b.tensors = ts;
  for (const auto& t : ts) {
    b.data.push_back(t.data_ptr());
    b.counts.push_back(t.numel());
  }
  return b;
}

// gather and scatter went to gloo before pycomm ran them, and gloo moves dtypes
// pycomm does not (bool, complex): those still go there. (The other
// collectives raise a TypeError naming the dtype, as they always have.)
bool runs_dtype(const std::vector<at::Tensor>& ts) {
  core::DType d;
  return ts.size() == 1 && ts[0].defined() && to_core_dtype(ts[0].scalar_type(), &d);
}

void check_root(int64_t root, int size, const char* arg) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, arg, ": rank ", root, " is not in this group of ", size);
}

// A job's name in the trace: a literal, where c10d's opTypeToString makes a
// string on every call.
const char* op_name(c10d::OpType type) {
  switch (type) {
    case c10d::OpType::ALLREDUCE: return "allreduce";
    case c10d::OpType::BROADCAST: return "broadcast";
    case c10d::OpType::REDUCE: return "reduce";
    case c10d::OpType::ALLGATHER: return "allgather";
    case c10d::OpType::_ALLGATHER_BASE: return "_allgather_base";
    case c10d::OpType::ALLGATHER_COALESCED: return "allgather_coalesced";
    case c10d::OpType::REDUCE_SCATTER: return "reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE: return "_reduce_scatter_base";
    case c10d::OpType::ALLTOALL: return "alltoall";
    case c10d::OpType::ALLTOALL_BASE: return "alltoall_base";
    case c10d::OpType::BARRIER: return "barrier";
    case c10d::OpType::GATHER: return "gather";
    case c10d::OpType::SCATTER: return "scatter";
    default: return "collective";
  }
}

}  // namespace

Backend::Backend(int rank, int size, std::shared_ptr<Communicator> comm,
                 std::shared_ptr<const Plan> plan, c10::intrusive_ptr<c10d::Backend> fallback)
    : c10d::Backend(rank, size),
      comm_(std::move(comm)),
      plan_(std::move(plan)),
      fallback_(std::move(fallback)) {}

Backend::~Backend() = default;

Backend::Reduction Backend::reduction_of(const c10d::ReduceOp& op) {
  Reduction r;
  r.native = to_core_op(op, &r.op, &r.premul);
  if (r.premul) {
    auto* s = dynamic_cast<PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK_VALUE(s != nullptr, "op: premul_sum without its factor");
    r.factor = s->tensor_factor.defined() ? s->tensor_factor.item<double>() : s->double_factor;
  }
  return r;
}

core::Plan Backend::plan_of(core::Collective c, Where w, bool native_op) const {
  core::RouteQuery q = plan_->route_query();
  q.collective = c;
  q.cuda = w.cuda;
  q.sparse = w.sparse;
  q.native_op = native_op;
  return core::route(q).plan;
}

void Backend::shutdown() {
  // What was queued still runs: the peers run their side of it too.
  comm_->flush();
  comm_->close();
}

c10d::ErrorType Backend::getError() {
  return comm_->broken() ? c10d::ErrorType::COMM_ERROR : c10d::ErrorType::SUCCESS;
}

void Backend::setTimeout(std::chrono::milliseconds timeout) {
  // Every rank's waits share one deadline, fixed when the communicator set up
  // (pycomm.init(timeout=...), PYCOMM_TIMEOUT, or the group's timeout): one
  // rank cannot move it alone.
  TORCH_WARN("pycomm: setTimeout(", timeout.count(), " ms) is ignored; this group keeps the ",
             comm_->config().wait.timeout_s, " s timeout it was created with");
}

void Backend::abort() { comm_->abort("rank " + std::to_string(getRank()) + " aborted the process group"); }

c10::intrusive_ptr<c10d::Work> Backend::launch(c10d::OpType type, Job job, bool async_op) {
  // A blocking call from Python (async_op=False: the caller waits at once)
  // runs in its thread when the communicator is idle: no hand-off to the
  // worker. Anything asynchronous (DDP's buckets, FSDP) goes to the worker,
  // so it overlaps the caller's compute.
  job.what = op_name(type);
  if (!async_op && comm_->run_if_idle(job.body, job.what, bytes_of(job.outputs))) {
    auto item = std::make_shared<WorkItem>(std::move(job));
    item->finish(nullptr);
    return c10::make_intrusive<Work>(getRank(), type, std::move(item));
  }
  return c10::make_intrusive<Work>(getRank(), type, comm_->enqueue(std::move(job)));
}

c10d::Backend& Backend::fallback() {
  comm_->flush();
  return *fallback_;
}

// ---------------------------------------------------------------- all_reduce, broadcast, reduce

c10::intrusive_ptr<c10d::Work> Backend::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  ++sequence_;
  const Reduction red = reduction_of(opts.reduceOp);
  const core::Plan plan = plan_of(core::Collective::kAllReduce, where_of(tensors), red.native);
  if (plan == core::Plan::kFallback) return fallback().allreduce(tensors, opts);
  single_tensor(tensors, "tensor");
  return all_reduce(tensors, red, plan, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  ++sequence_;
  const Reduction red = reduction_of(opts.reduceOp);
  const core::Plan plan = plan_of(core::Collective::kAllReduce, where_of(tensors), red.native);
  if (plan == core::Plan::kFallback) return fallback().allreduce_coalesced(tensors, opts);
  return all_reduce(tensors, red, plan, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::all_reduce(std::vector<at::Tensor>& tensors,
                                                   const Reduction& red, core::Plan plan,
                                                   bool async_op) {
  if (plan == core::Plan::kCuda) return cuda_all_reduce(tensors, red, async_op);
  for (const auto& t : tensors) check_op_for_dtype(red.op, red.premul, check_tensor(t, "tensor"));
  Job job;
  job.outputs = tensors;
  job.body = [plan = plan_, flats = flat_each(tensors), red](const core::Context& ctx) {
    for (const auto& t : flats) {
      if (red.premul) t.mul_(red.factor);
      plan->all_reduce(ctx, t, red.op);
    }
  };
  return launch(c10d::OpType::ALLREDUCE, std::move(job), async_op);
}

c10::intrusive_ptr<c10d::Work> Backend::cuda_all_reduce(std::vector<at::Tensor>& tensors,
                                                        const Reduction& red, bool async_op) {
  std::vector<Job> parts;
  for (auto& t : tensors) {
    core::AllReduceArgs a;
    a.dtype = check_tensor(t, "tensor", /*cuda_ok=*/true);
    check_op_for_dtype(red.op, red.premul, a.dtype);
    // On the caller's stream, before the job records where the kernel may start.
    if (red.premul) t.mul_(red.factor);
    a.data = t.data_ptr();
    a.count = size_t(t.numel());
    a.op = red.op;
    parts.push_back(cuda_all_reduce_job(*comm_, t, "tensor", a));
  }
  if (parts.size() == 1) return launch(c10d::OpType::ALLREDUCE, std::move(parts[0]), async_op);
  Job job;
  job.outputs = tensors;
  job.devices = parts.empty() ? std::vector<c10::Device>{} : parts[0].devices;
  job.stream = parts.empty() ? std::nullopt : parts[0].stream;
  job.body = [parts = std::move(parts)](const core::Context& ctx) {
    for (const Job& p : parts) p.body(ctx);
  };
  return launch(c10d::OpType::ALLREDUCE, std::move(job), async_op);
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(std::vector<at::Tensor>& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  ++sequence_;
  if (plan_of(core::Collective::kBroadcast, where_of(tensors)) == core::Plan::kFallback) {
    return fallback().broadcast(tensors, opts);
  }
  const at::Tensor& t = single_tensor(tensors, "tensor");
  check_tensor(t, "tensor");
  check_root(opts.rootRank, getSize(), "src");
  Job job;
  job.outputs = tensors;
  job.body = [plan = plan_, t = flat(t), root = int(opts.rootRank)](const core::Context& ctx) {
    plan->broadcast(ctx, t, root);
  };
  return launch(c10d::OpType::BROADCAST, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(std::vector<at::Tensor>& tensors,
                                               const c10d::ReduceOptions& opts) {
  ++sequence_;
  const Reduction red = reduction_of(opts.reduceOp);
  if (plan_of(core::Collective::kReduce, where_of(tensors), red.native) == core::Plan::kFallback) {
    return fallback().reduce(tensors, opts);
  }
  const at::Tensor& t = single_tensor(tensors, "tensor");
  check_op_for_dtype(red.op, red.premul, check_tensor(t, "tensor"));
  check_root(opts.rootRank, getSize(), "dst");
  const int root = int(opts.rootRank);
  Job job;
  job.outputs = tensors;
  job.body = [plan = plan_, t = flat(t), red, root, rank = getRank()](const core::Context& ctx) {
    // The root's tensor is the output; the others' are not to be written.
    const at::Tensor in = !red.premul ? t : root == rank ? t.mul_(red.factor) : t.mul(red.factor);
    plan->reduce(ctx, in, red.op, root);
  };
  return launch(c10d::OpType::REDUCE, std::move(job), opts.asyncOp);
}

// ---------------------------------------------------------------- all_gather

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  ++sequence_;
  if (plan_of(core::Collective::kAllGather, where_of(output, input)) ==
      core::Plan::kFallback) {
    return fallback()._allgather_base(output, input, opts);
  }
  std::vector<at::Tensor> outs{output}, ins{input};
  return all_gather_tensors(outs, ins, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  ++sequence_;
  if (plan_of(core::Collective::kAllGather, where_of(outputs, inputs)) ==
      core::Plan::kFallback) {
    return fallback().allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  return all_gather_tensors(outputs, inputs, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::all_gather_tensors(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           bool async_op) {
  check_all_gather_pairs(outputs, inputs, getSize());
  Job job;
  job.outputs = outputs;
  job.body = [plan = plan_, ins = flat_each(inputs), outs = flat_each(outputs)](const core::Context& ctx) {
    for (size_t i = 0; i < ins.size(); ++i) plan->all_gather(ctx, ins[i], outs[i]);
  };
  return launch(c10d::OpType::_ALLGATHER_BASE, std::move(job), async_op);
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  ++sequence_;
  if (plan_of(core::Collective::kAllGather, where_of(outputs, inputs)) == core::Plan::kFallback) {
    return fallback().allgather(outputs, inputs, opts);
  }
  single_tensor(inputs, "input_tensor");
  TORCH_CHECK_VALUE(outputs.size() == 1, "tensor_list: expected one list (one device per rank)");
  return all_gather_lists(outputs, inputs, c10d::OpType::ALLGATHER, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  ++sequence_;
  if (plan_of(core::Collective::kAllGather, where_of(outputs, inputs)) == core::Plan::kFallback) {
    return fallback().allgather_coalesced(outputs, inputs, opts);
  }
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
  return all_gather_lists(by_input, inputs, c10d::OpType::ALLGATHER_COALESCED, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::all_gather_lists(
    const std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    c10d::OpType type, bool async_op) {
  check_all_gather_lists(outputs, inputs, getSize());
  std::vector<at::Tensor> all_outputs;
  for (const auto& list : outputs) all_outputs.insert(all_outputs.end(), list.begin(), list.end());
  Job job;
  job.outputs = all_outputs;
  job.body = [plan = plan_, ins = flat_each(inputs), outputs, world = getSize()](const core::Context& ctx) {
    // The list form gathers into one buffer, then copies out.
    for (size_t i = 0; i < ins.size(); ++i) {
      const int64_t n = ins[i].numel();
      at::Tensor gathered = at::empty({n * world}, ins[i].options());
      plan->all_gather(ctx, ins[i], gathered);
      for (size_t r = 0; r < outputs[i].size(); ++r) {
        outputs[i][r].view({-1}).copy_(gathered.narrow(0, int64_t(r) * n, n));
      }
    }
  };
  return launch(type, std::move(job), async_op);
}

// ---------------------------------------------------------------- reduce_scatter

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::ReduceScatterOptions& opts) {
  ++sequence_;
  const Reduction red = reduction_of(opts.reduceOp);
  if (plan_of(core::Collective::kReduceScatter, where_of(output, input), red.native) ==
      core::Plan::kFallback) {
    return fallback()._reduce_scatter_base(output, input, opts);
  }
  std::vector<at::Tensor> outs{output}, ins{input};
  return reduce_scatter_tensors(outs, ins, red, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  ++sequence_;
  const Reduction red = reduction_of(opts.reduceOp);
  if (plan_of(core::Collective::kReduceScatter, where_of(outputs, inputs), red.native) ==
      core::Plan::kFallback) {
    return fallback().reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  return reduce_scatter_tensors(outputs, inputs, red, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensors(std::vector<at::Tensor>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const Reduction& red, bool async_op) {
  check_reduce_scatter_pairs(outputs, inputs, getSize(), red.op, red.premul);
  Job job;
  job.outputs = outputs;
  job.body = [plan = plan_, ins = flat_each(inputs), outs = flat_each(outputs), red](const core::Context& ctx) {
    for (size_t i = 0; i < ins.size(); ++i) {
      // The input is not ours to scale in place.
      plan->reduce_scatter(ctx, red.premul ? ins[i].mul(red.factor) : ins[i], outs[i], red.op);
    }
  };
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE, std::move(job), async_op);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  ++sequence_;
  const Reduction red = reduction_of(opts.reduceOp);
  if (plan_of(core::Collective::kReduceScatter, where_of(outputs, inputs), red.native) ==
      core::Plan::kFallback) {
    return fallback().reduce_scatter(outputs, inputs, opts);
  }
  check_reduce_scatter_list(outputs, inputs, getSize(), red.op, red.premul);
  Job job;
  job.outputs = outputs;
  job.body = [plan = plan_, out = flat(outputs[0]), list = inputs[0], red](const core::Context& ctx) {
    // The list form reduces from one buffer: the inputs, concatenated here on
    // the worker, in call order (an earlier queued collective may write them).
    at::Tensor in = at::cat(flat_each(list));
    if (red.premul) in.mul_(red.factor);
    plan->reduce_scatter(ctx, in, out, red.op);
  };
  return launch(c10d::OpType::REDUCE_SCATTER, std::move(job), opts.asyncOp);
}

// ---------------------------------------------------------------- all_to_all, barrier

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_split_sizes,
                                                      std::vector<int64_t>& input_split_sizes,
                                                      const c10d::AllToAllOptions& opts) {
  ++sequence_;
  if (plan_of(core::Collective::kAllToAll, where_of(output, input)) ==
      core::Plan::kFallback) {
    return fallback().alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
  }
  check_all_to_all_single(output, input);
  // The input's splits are checked first, on every compiler.
  Blocks send = blocks_of(input, input_split_sizes, getSize(), "input");
  Blocks recv = blocks_of(output, output_split_sizes, getSize(), "output");
  return all_to_all(c10d::OpType::ALLTOALL_BASE, {output}, std::move(send), std::move(recv),
                    opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall(std::vector<at::Tensor>& outputs,
                                                 std::vector<at::Tensor>& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  ++sequence_;
  if (plan_of(core::Collective::kAllToAll, where_of(outputs, inputs)) ==
      core::Plan::kFallback) {
    return fallback().alltoall(outputs, inputs, opts);
  }
  check_all_to_all_lists(outputs, inputs, getSize());
  return all_to_all(c10d::OpType::ALLTOALL, outputs, blocks_of(inputs), blocks_of(outputs),
                    opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::all_to_all(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                   Blocks send, Blocks recv, bool async_op) {
  Job job;
  job.outputs = std::move(outputs);
  job.body = [plan = plan_, send = std::move(send), recv = std::move(recv)](const core::Context& ctx) {
    plan->all_to_all(ctx, send, recv);
  };
  return launch(type, std::move(job), async_op);
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  ++sequence_;
  Job job;
  job.body = [plan = plan_](const core::Context& ctx) { plan->barrier(ctx); };
  return launch(c10d::OpType::BARRIER, std::move(job), opts.asyncOp);
}

// ---------------------------------------------------------------- gather, scatter (one host)

c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs,
                                               const c10d::GatherOptions& opts) {
  ++sequence_;
  if (plan_of(core::Collective::kGather, where_of(outputs, inputs)) == core::Plan::kFallback ||
      !runs_dtype(inputs)) {
    return fallback().gather(outputs, inputs, opts);
  }
  const at::Tensor& in = single_tensor(inputs, "tensor");
  const core::DType dtype = check_tensor(in, "tensor");
  check_root(opts.rootRank, getSize(), "dst");
  const int root = int(opts.rootRank);
  const bool is_root = root == getRank();
  // c10d passes the root's list, and no list (or an empty one) elsewhere.
  std::vector<at::Tensor> list;
  if (is_root) {
    TORCH_CHECK_VALUE(outputs.size() == 1, "gather_list: expected one list on the destination rank");
    list = outputs[0];
    TORCH_CHECK_VALUE(int64_t(list.size()) == getSize(), "gather_list: expected ", getSize(),
                      " tensors (the world size), got ", list.size());
    for (const auto& o : list) check_like(o, "gather_list[i]", dtype, in.numel(), "tensor");
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                      "gather_list: only the destination rank (dst=", root, ") takes one");
  }
  Job job;
  job.outputs = list;
  job.body = [plan = plan_, in = flat(in), list, root, world = getSize()](const core::Context& ctx) {
    // The list gathers into one buffer on the root, then copies out.
    const int64_t n = in.numel();
    const at::Tensor gathered = list.empty() ? at::Tensor() : at::empty({n * world}, in.options());
    plan->gather(ctx, in, gathered, root);
    for (size_t r = 0; r < list.size(); ++r) {
      list[r].view({-1}).copy_(gathered.narrow(0, int64_t(r) * n, n));
    }
  };
  return launch(c10d::OpType::GATHER, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ScatterOptions& opts) {
  ++sequence_;
  if (plan_of(core::Collective::kScatter, where_of(outputs, inputs)) == core::Plan::kFallback ||
      !runs_dtype(outputs)) {
    return fallback().scatter(outputs, inputs, opts);
  }
  const at::Tensor& out = single_tensor(outputs, "tensor");
  const core::DType dtype = check_tensor(out, "tensor");
  check_root(opts.rootRank, getSize(), "src");
  const int root = int(opts.rootRank);
  std::vector<at::Tensor> list;
  if (root == getRank()) {
    TORCH_CHECK_VALUE(inputs.size() == 1, "scatter_list: expected one list on the source rank");
    list = inputs[0];
    TORCH_CHECK_VALUE(int64_t(list.size()) == getSize(), "scatter_list: expected ", getSize(),
                      " tensors (the world size), got ", list.size());
    for (const auto& t : list) check_like(t, "scatter_list[i]", dtype, out.numel(), "tensor");
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                      "scatter_list: only the source rank (src=", root, ") takes one");
  }
  Job job;
  job.outputs = outputs;
  job.body = [plan = plan_, out = flat(out), list, root](const core::Context& ctx) {
    // The root's list scatters from one buffer, concatenated here on the
    // worker, in call order (an earlier queued collective may write the list).
    const at::Tensor packed = list.empty() ? at::Tensor() : at::cat(flat_each(list));
    plan->scatter(ctx, packed, out, root);
  };
  return launch(c10d::OpType::SCATTER, std::move(job), opts.asyncOp);
}

// ---------------------------------------------------------------- point-to-point

namespace {

// What a send or receive completes: its Future, made only when someone asks.
// dist.send and dist.recv never do, and making and completing one with its
// list of tensors every call cost 8-byte messages about 0.1 us a call (through
// the backend, one way: 1.56-1.68 us with, 1.37-1.43 us without, in turns).
// The operation may complete on the engine's helper before or after
// getFuture().
class P2PCompletion {
 public:
  explicit P2PCompletion(std::vector<at::Tensor> tensors) : tensors_(std::move(tensors)) {}

  const std::vector<at::Tensor>& tensors() const { return tensors_; }

  void complete(std::exception_ptr error) {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      error_ = std::move(error);
      future = future_;
    }
    if (future) finish(*future);
  }

  c10::intrusive_ptr<c10::ivalue::Future> future() {
    bool finish_now = false;
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!future_) {
        future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
        finish_now = done_;  // complete() ran before: nobody else will finish it
      }
      future = future_;
    }
    if (finish_now) finish(*future);
    return future;
  }

 private:
  // Outside mu_: the Future runs its callbacks, which may ask for it again.
  void finish(c10::ivalue::Future& future) {
    if (error_) {
      future.setError(error_);
    } else {
      future.markCompleted(c10::IValue(tensors_));
    }
  }

  const std::vector<at::Tensor> tensors_;
  std::mutex mu_;
  bool done_ = false;           // under mu_; error_ is written before it and read after
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// c10d's view of one send or receive: wait() drives the engine's progress in
// the caller's thread (the engine's helper drives it for nobody else).
class P2PWork : public c10d::Work {
 public:
  P2PWork(int rank, c10d::OpType type, std::shared_ptr<Communicator> comm, core::P2PHandle op,
          std::shared_ptr<P2PCompletion> completion)
      : c10d::Work(rank, type),
        comm_(std::move(comm)),
        op_(std::move(op)),
        completion_(std::move(completion)) {}

  // Someone polls instead of waiting: the helper drives it meanwhile.
  bool isCompleted() override {
    if (op_->done()) return true;
    comm_->p2p().help(op_);
    return op_->done();
  }
  bool isSuccess() const override { return op_->done() && !op_->error(); }
  std::exception_ptr exception() const override { return op_->error(); }
  // The engine's deadline (posted + the group's timeout) bounds the wait.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    comm_->p2p().wait(op_);
    return true;
  }
  // Whoever waits on the Future does not drive the engine: the helper does.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    comm_->p2p().help(op_);
    return completion_->future();
  }
  std::vector<at::Tensor> result() override { return completion_->tensors(); }
  // recv_anysource's answer (dist.recv(src=None) returns it).
  int sourceRank() const override { return op_->source; }

 private:
  std::shared_ptr<Communicator> comm_;
  core::P2PHandle op_;
  std::shared_ptr<P2PCompletion> completion_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> Backend::point_to_point(core::P2POp::Kind kind,
                                                       std::vector<at::Tensor>& tensors, int peer,
                                                       int tag) {
  const bool sends = kind == core::P2POp::Kind::kSend;
  const char* what = sends ? "send" : "recv";
  const at::Tensor& t = single_tensor(tensors, "tensor");
  // Bytes move as they are, so every dtype goes, bool and complex included.
  TORCH_CHECK_VALUE(t.is_contiguous(), what, ": tensor must be contiguous, got strides ", t.strides());
  if (peer != core::P2POp::kAnySource) {
    TORCH_CHECK_VALUE(peer >= 0 && peer < getSize() && peer != getRank(), sends ? "dst" : "src",
                      ": rank ", peer, " is not a peer of rank ", getRank(), " in this group of ",
                      getSize());
  }
  auto op = std::make_shared<core::P2POp>();
  op->kind = kind;
  op->peer = peer;
  op->tag = tag;
  op->data = static_cast<char*>(t.data_ptr());
  op->bytes = t.nbytes();
  op->type = uint32_t(t.scalar_type());
  // It holds the tensors until the operation completes, even if the Work is dropped.
  auto completion = std::make_shared<P2PCompletion>(tensors);
  op->on_done = [completion](const core::P2POp& o) { completion->complete(o.error()); };
  comm_->p2p().post(op);
  return c10::make_intrusive<P2PWork>(getRank(), sends ? c10d::OpType::SEND : c10d::OpType::RECV, comm_,
                                      std::move(op), std::move(completion));
}

c10::intrusive_ptr<c10d::Work> Backend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  if (plan_of(core::Collective::kSend, where_of(tensors)) == core::Plan::kFallback) {
    return fallback().send(tensors, dst, tag);
  }
  return point_to_point(core::P2POp::Kind::kSend, tensors, dst, tag);
}

c10::intrusive_ptr<c10d::Work> Backend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  if (plan_of(core::Collective::kRecv, where_of(tensors)) == core::Plan::kFallback) {
    return fallback().recv(tensors, src, tag);
  }
  return point_to_point(core::P2POp::Kind::kRecv, tensors, src, tag);
}

c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  if (plan_of(core::Collective::kRecv, where_of(tensors)) == core::Plan::kFallback) {
    return fallback().recvAnysource(tensors, tag);
  }
  return point_to_point(core::P2POp::Kind::kRecv, tensors, core::P2POp::kAnySource, tag);
}

// ---------------------------------------------------------------- the fallback's

void Backend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  ++sequence_;
  fallback().monitoredBarrier(opts, wait_all_ranks);
}

}  // namespace pycomm
