#include "backend.h"

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

// Elements per row of dim 0, for split sizes given in rows.
int64_t row_elems(const at::Tensor& t) { return t.dim() == 0 || t.size(0) == 0 ? 0 : t.numel() / t.size(0); }

// A list of tensors as one contiguous buffer, for the list forms of the
// collectives whose core takes one vector.
at::Tensor flat_of(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const auto& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

}  // namespace

bool any_cuda(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts) {
    if (t.defined() && t.is_cuda()) return true;
  }
  return false;
}

bool any_cuda(const std::vector<std::vector<at::Tensor>>& lists) {
  for (const auto& l : lists) {
    if (any_cuda(l)) return true;
  }
  return false;
}

bool reduction_of(const c10d::ReduceOp& op, Reduction* r) {
  if (!to_core_op(op, &r->op, &r->premul)) return false;
  if (r->premul) {
    auto* s = dynamic_cast<PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK_VALUE(s != nullptr, "op: premul_sum without its factor");
    r->factor = s->tensor_factor.defined() ? s->tensor_factor.item<double>() : s->double_factor;
  }
  return true;
}

Backend::Backend(std::shared_ptr<Communicator> comm, c10::intrusive_ptr<c10d::Backend> fallback)
    : Backend(comm->rank(), comm->world(), comm, std::move(fallback)) {}

Backend::Backend(int rank, int size, std::shared_ptr<Communicator> comm,
                 c10::intrusive_ptr<c10d::Backend> fallback)
    : c10d::Backend(rank, size), comm_(std::move(comm)), fallback_(std::move(fallback)) {}

Backend::~Backend() = default;

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
  if (!async_op && comm_->run_if_idle(job.body)) {
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

c10::intrusive_ptr<c10d::Work> Backend::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  c10d::AllreduceCoalescedOptions o;
  o.reduceOp = opts.reduceOp;
  o.timeout = opts.timeout;
  o.asyncOp = opts.asyncOp;
  std::vector<at::Tensor> one{single_tensor(tensors, "tensor")};
  return allreduce_coalesced(one, o);
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Reduction red;
  if (!reduction_of(opts.reduceOp, &red)) return fallback().allreduce_coalesced(tensors, opts);
  if (any_cuda(tensors)) return cuda_allreduce(tensors, red, opts.asyncOp);
  std::vector<core::AllReduceArgs> args;
  for (const auto& t : tensors) {
    core::AllReduceArgs a;
    a.dtype = check_tensor(t, "tensor");
    check_op_for_dtype(red.op, red.premul, a.dtype);
    a.data = t.data_ptr();
    a.count = size_t(t.numel());
    a.op = red.op;
    // A failed step cannot use a restored gradient bucket: skip the copy.
    a.restore = false;
    args.push_back(a);
  }
  Job job;
  job.outputs = tensors;
  job.body = [args = std::move(args), red, ts = tensors](const core::Context& ctx) {
    for (size_t i = 0; i < args.size(); ++i) {
      if (red.premul) ts[i].mul_(red.factor);
      core::all_reduce(ctx, args[i]);
    }
  };
  return launch(c10d::OpType::ALLREDUCE, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::cuda_allreduce(std::vector<at::Tensor>& tensors,
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
  if (any_cuda(tensors)) return fallback().broadcast(tensors, opts);
  const at::Tensor& t = single_tensor(tensors, "tensor");
  core::BroadcastArgs a;
  a.dtype = check_tensor(t, "tensor");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "src: rank ", opts.rootRank,
                    " is not in this group of ", getSize());
  a.data = t.data_ptr();
  a.count = size_t(t.numel());
  a.root = int(opts.rootRank);
  a.restore = false;
  Job job;
  job.outputs = tensors;
  job.body = [a, keep = t](const core::Context& ctx) { core::broadcast(ctx, a); };
  return launch(c10d::OpType::BROADCAST, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(std::vector<at::Tensor>& tensors,
                                               const c10d::ReduceOptions& opts) {
  Reduction red;
  if (!reduction_of(opts.reduceOp, &red) || any_cuda(tensors)) return fallback().reduce(tensors, opts);
  const at::Tensor& t = single_tensor(tensors, "tensor");
  core::ReduceArgs a;
  a.dtype = check_tensor(t, "tensor");
  check_op_for_dtype(red.op, red.premul, a.dtype);
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "dst: rank ", opts.rootRank,
                    " is not in this group of ", getSize());
  a.data = t.data_ptr();
  a.count = size_t(t.numel());
  a.op = red.op;
  a.root = int(opts.rootRank);
  a.restore = false;
  Job job;
  job.outputs = tensors;
  job.body = [a, red, keep = t](const core::Context& ctx) mutable {
    at::Tensor scaled;
    if (red.premul) {
      // The root's tensor is the output; the others' are not to be written.
      scaled = a.root == ctx.session.rank() ? keep.mul_(red.factor) : keep.mul(red.factor);
      a.data = scaled.data_ptr();
    }
    core::reduce(ctx, a);
  };
  return launch(c10d::OpType::REDUCE, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  if (output.is_cuda() || input.is_cuda()) return fallback()._allgather_base(output, input, opts);
  std::vector<at::Tensor> outs{output}, ins{input};
  return allgather_into_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (any_cuda(outputs) || any_cuda(inputs)) {
    return fallback().allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  const std::vector<core::DType> dtypes = check_all_gather_pairs(outputs, inputs, getSize());
  std::vector<core::AllGatherArgs> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    core::AllGatherArgs a;
    a.dtype = dtypes[i];
    a.input = inputs[i].data_ptr();
    a.output = outputs[i].data_ptr();
    a.count = size_t(inputs[i].numel());
    args.push_back(a);
  }
  Job job;
  job.outputs = outputs;
  job.body = [args = std::move(args), keep = inputs](const core::Context& ctx) {
    for (const auto& a : args) core::all_gather(ctx, a);
  };
  return launch(c10d::OpType::_ALLGATHER_BASE, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  if (any_cuda(outputs) || any_cuda(inputs)) return fallback().allgather(outputs, inputs, opts);
  single_tensor(inputs, "input_tensor");
  TORCH_CHECK_VALUE(outputs.size() == 1, "tensor_list: expected one list (one device per rank)");
  return allgather_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (any_cuda(outputs) || any_cuda(inputs)) return fallback().allgather_coalesced(outputs, inputs, opts);
  const std::vector<core::DType> dtypes = check_all_gather_lists(outputs, inputs, getSize());
  std::vector<core::AllGatherArgs> args;
  std::vector<at::Tensor> flats, all_outputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    core::AllGatherArgs a;
    a.dtype = dtypes[i];
    all_outputs.insert(all_outputs.end(), outputs[i].begin(), outputs[i].end());
    // The list form gathers into one buffer, then copies out.
    at::Tensor flat = at::empty({inputs[i].numel() * getSize()}, inputs[i].options());
    a.input = inputs[i].data_ptr();
    a.output = flat.data_ptr();
    a.count = size_t(inputs[i].numel());
    args.push_back(a);
    flats.push_back(flat);
  }
  Job job;
  job.outputs = all_outputs;
  job.body = [args = std::move(args), flats, outputs, keep = inputs](const core::Context& ctx) {
    for (size_t i = 0; i < args.size(); ++i) {
      core::all_gather(ctx, args[i]);
      const int64_t n = int64_t(args[i].count);
      for (size_t r = 0; r < outputs[i].size(); ++r) {
        outputs[i][r].view({-1}).copy_(flats[i].narrow(0, int64_t(r) * n, n));
      }
    }
  };
  return launch(c10d::OpType::ALLGATHER, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::ReduceScatterOptions& opts) {
  if (output.is_cuda() || input.is_cuda()) return fallback()._reduce_scatter_base(output, input, opts);
  std::vector<at::Tensor> outs{output}, ins{input};
  return reduce_scatter_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Reduction red;
  if (!reduction_of(opts.reduceOp, &red) || any_cuda(outputs) || any_cuda(inputs)) {
    return fallback().reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  const std::vector<core::DType> dtypes =
      check_reduce_scatter_pairs(outputs, inputs, getSize(), red.op, red.premul);
  std::vector<core::ReduceScatterArgs> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    core::ReduceScatterArgs a;
    a.dtype = dtypes[i];
    a.input = inputs[i].data_ptr();
    a.output = outputs[i].data_ptr();
    a.count = size_t(outputs[i].numel());
    a.op = red.op;
    args.push_back(a);
  }
  Job job;
  job.outputs = outputs;
  job.body = [args = std::move(args), red, keep = inputs](const core::Context& ctx) mutable {
    for (size_t i = 0; i < args.size(); ++i) {
      at::Tensor scaled;
      if (red.premul) {
        // The input is not ours to scale in place.
        scaled = keep[i].mul(red.factor);
        args[i].input = scaled.data_ptr();
      }
      core::reduce_scatter(ctx, args[i]);
    }
  };
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  Reduction red;
  if (!reduction_of(opts.reduceOp, &red) || any_cuda(outputs) || any_cuda(inputs)) {
    return fallback().reduce_scatter(outputs, inputs, opts);
  }
  const core::DType dtype =
      check_reduce_scatter_list(outputs, inputs, getSize(), red.op, red.premul);
  const at::Tensor& out = outputs[0];
  core::ReduceScatterArgs a;
  a.dtype = dtype;
  a.output = out.data_ptr();
  a.count = size_t(out.numel());
  a.op = red.op;
  Job job;
  job.outputs = outputs;
  job.body = [a, red, list = inputs[0]](const core::Context& ctx) mutable {
    // The list form reduces from one buffer: the inputs, concatenated here on
    // the worker, in call order (an earlier queued collective may write them).
    at::Tensor flat = flat_of(list);
    if (red.premul) flat.mul_(red.factor);
    a.input = flat.data_ptr();
    core::reduce_scatter(ctx, a);
  };
  return launch(c10d::OpType::REDUCE_SCATTER, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_split_sizes,
                                                      std::vector<int64_t>& input_split_sizes,
                                                      const c10d::AllToAllOptions& opts) {
  if (output.is_cuda() || input.is_cuda()) {
    return fallback().alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
  }
  const core::DType dtype = check_all_to_all_single(output, input);
  const int world = getSize();
  auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* arg) {
    std::vector<size_t> c(static_cast<size_t>(world));
    if (splits.empty()) {
      TORCH_CHECK_VALUE(t.numel() % world == 0, arg, ": ", t.numel(),
                        " elements do not split evenly over ", world, " ranks");
      for (auto& x : c) x = size_t(t.numel() / world);
      return c;
    }
    TORCH_CHECK_VALUE(int64_t(splits.size()) == world, arg, "_split_sizes: expected ", world,
                      " sizes (the world size), got ", splits.size());
    int64_t rows = 0;
    for (int r = 0; r < world; ++r) {
      TORCH_CHECK_VALUE(splits[size_t(r)] >= 0, arg, "_split_sizes: negative size ", splits[size_t(r)]);
      rows += splits[size_t(r)];
      c[size_t(r)] = size_t(splits[size_t(r)] * row_elems(t));
    }
    TORCH_CHECK_VALUE(t.dim() > 0 && rows == t.size(0), arg, "_split_sizes: they add up to ", rows,
                      " rows, the tensor has ", t.dim() > 0 ? t.size(0) : 0);
    return c;
  };
  std::vector<size_t> sc = counts(input, input_split_sizes, "input");
  std::vector<size_t> rc = counts(output, output_split_sizes, "output");
  const size_t esize = core::dtype_size(dtype);
  std::vector<const void*> sp;
  std::vector<void*> rp;
  size_t so = 0, ro = 0;
  for (int r = 0; r < world; ++r) {
    sp.push_back(static_cast<const char*>(input.data_ptr()) + so * esize);
    rp.push_back(static_cast<char*>(output.data_ptr()) + ro * esize);
    so += sc[size_t(r)];
    ro += rc[size_t(r)];
  }
  Job job;
  job.outputs = {output};
  job.body = [sp, rp, sc, rc, dtype, keep = input](const core::Context& ctx) {
    core::AllToAllArgs a;
    a.send = sp.data();
    a.send_counts = sc.data();
    a.recv = rp.data();
    a.recv_counts = rc.data();
    a.dtype = dtype;
    core::all_to_all(ctx, a);
  };
  return launch(c10d::OpType::ALLTOALL_BASE, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall(std::vector<at::Tensor>& outputs,
                                                 std::vector<at::Tensor>& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  if (any_cuda(outputs) || any_cuda(inputs)) return fallback().alltoall(outputs, inputs, opts);
  const int world = getSize();
  const core::DType dtype = check_all_to_all_lists(outputs, inputs, world);
  std::vector<const void*> sp;
  std::vector<void*> rp;
  std::vector<size_t> sc, rc;
  for (int r = 0; r < world; ++r) {
    sp.push_back(inputs[size_t(r)].data_ptr());
    sc.push_back(size_t(inputs[size_t(r)].numel()));
    rp.push_back(outputs[size_t(r)].data_ptr());
    rc.push_back(size_t(outputs[size_t(r)].numel()));
  }
  Job job;
  job.outputs = outputs;
  job.body = [sp, rp, sc, rc, dtype, keep = inputs](const core::Context& ctx) {
    core::AllToAllArgs a;
    a.send = sp.data();
    a.send_counts = sc.data();
    a.recv = rp.data();
    a.recv_counts = rc.data();
    a.dtype = dtype;
    core::all_to_all(ctx, a);
  };
  return launch(c10d::OpType::ALLTOALL, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  Job job;
  job.body = [](const core::Context& ctx) { core::barrier(ctx); };
  return launch(c10d::OpType::BARRIER, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs,
                                               const c10d::GatherOptions& opts) {
  return fallback().gather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ScatterOptions& opts) {
  return fallback().scatter(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return fallback().send(tensors, dst, tag);
}

c10::intrusive_ptr<c10d::Work> Backend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return fallback().recv(tensors, src, tag);
}

c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return fallback().recvAnysource(tensors, tag);
}

void Backend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  fallback().monitoredBarrier(opts, wait_all_ranks);
}

}  // namespace pycomm
