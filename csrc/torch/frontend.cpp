#include "frontend.h"

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <mutex>
#include <optional>

#include "../core/call_profile.h"
#include "../core/checked_size.h"
#include "../core/settings_check.h"
#include "cuda_path.h"
#include "dtype_map.h"
#include "staged_tensor.h"
#include "tensor_checks.h"
#include "torch_compat.h"

namespace pycomm {
namespace {

// c10d's view of one queued job: wait() rethrows pycomm's typed error
// (CommTimeout, CollectiveMismatch), the future holds the output tensors.
class Work : public c10d::Work {
 public:
  Work(int rank, c10d::OpType type, std::shared_ptr<WorkItem> item,
       std::weak_ptr<Communicator> comm = {})
      : c10d::Work(rank, type), item_(std::move(item)), comm_(std::move(comm)) {}

  bool isCompleted() override { return item_->completed(); }
  bool isSuccess() const override { return item_->completed() && !item_->error(); }
  std::exception_ptr exception() const override { return item_->error(); }
  // pycomm's own deadline bounds every wait; c10d's timeout adds nothing.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    const core::PartTimer timed(core::CallPart::kCall, /*counts=*/false);
    // Not started yet: the waiter runs it, rather than sleep while the worker does.
    if (!item_->completed()) {
      if (auto comm = comm_.lock()) comm->run_if_next(item_);
    }
    item_->wait();
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return item_->future; }
  std::vector<at::Tensor> result() override { return item_->job.outputs; }

 private:
  std::shared_ptr<WorkItem> item_;
  std::weak_ptr<Communicator> comm_;  // of a queued job
};

void note(FrontEnd::Where& w, const at::Tensor& t) {
  if (!t.defined()) return;
  w.cuda |= t.is_cuda();
  if (t.layout() != at::kStrided) {
    w.sparse = true;
    return;
  }
  w.contiguous = w.contiguous && t.is_contiguous() && !t.is_conj() && !t.is_neg();
  if (!w.typed) {
    w.dtype = t.scalar_type();
    w.typed = true;
  }
}
void note(FrontEnd::Where& w, const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts) note(w, t);
}
void note(FrontEnd::Where& w, const std::vector<std::vector<at::Tensor>>& lists) {
  for (const auto& l : lists) note(w, l);
}
template <typename... Args>
FrontEnd::Where where_of(const Args&... args) {
  FrontEnd::Where w;
  (note(w, args), ...);
  return w;
}

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

FrontEnd::FrontEnd(int rank, int size, std::shared_ptr<Communicator> comm,
                 std::shared_ptr<const Plan> plan, c10::intrusive_ptr<c10d::Backend> fallback)
    : c10d::Backend(rank, size),
      comm_(std::move(comm)),
      plan_(std::move(plan)),
      fallback_(std::move(fallback)) {}

FrontEnd::~FrontEnd() = default;

FrontEnd::Reduction FrontEnd::reduction_of(const c10d::ReduceOp& op) {
  Reduction r;
  r.native = to_core_op(op, &r.op, &r.premul);
  if (r.premul) {
    auto* s = dynamic_cast<PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK_VALUE(s != nullptr, "op: premul_sum without its factor");
    r.factor = s->tensor_factor.defined() ? s->tensor_factor.item<double>() : s->double_factor;
  }
  return r;
}

core::RouteQuery FrontEnd::query(core::Collective c, const Where& w, const Reduction& red,
                                core::Algorithm requested) const {
  core::RouteQuery q = plan_->route_query();
  q.collective = c;
  q.requested = requested;
  q.cuda = w.cuda;
  q.sparse = w.sparse;
  q.native_op = red.native;
  q.dtype = core_dtype(w.dtype);
  q.op = red.op;
  q.contiguous = w.contiguous;
  return q;
}

core::Runner FrontEnd::runner_of(core::Collective c, const Where& w) const {
  return core::route(query(c, w, Reduction())).runner;
}

core::Route FrontEnd::route_of(core::RouteQuery q, const at::Tensor& sized, int64_t times) {
  if (sized.defined()) {
    // In the plan's elements: a complex element is two reals.
    q.count = size_t(sized.numel() * times) * (sized.is_complex() ? 2 : 1);
    q.bytes = size_t(sized.numel() * times) * size_t(sized.element_size());
  }
  return core::route(q);
}

std::vector<core::Algorithm> FrontEnd::algorithms_of(const core::RouteQuery& q, const core::Route& first,
                                                     const std::vector<at::Tensor>& sized) {
  std::vector<core::Algorithm> out;
  out.reserve(sized.size());
  for (size_t i = 0; i < sized.size(); ++i) {
    out.push_back(i == 0 ? first.algorithm : route_of(q, sized[i]).algorithm);
  }
  return out;
}

void FrontEnd::shutdown() {
  // What was queued still runs: the peers run their side of it too.
  comm_->flush();
  comm_->close();
}

c10d::ErrorType FrontEnd::getError() {
  return comm_->broken() ? c10d::ErrorType::COMM_ERROR : c10d::ErrorType::SUCCESS;
}

void FrontEnd::setTimeout(std::chrono::milliseconds timeout) {
  // This rank's waits from the next call on (torchft sets it on every quorum,
  // on every rank); the bounds are PYCOMM_TIMEOUT's.
  const double seconds = double(timeout.count()) / 1e3;
  core::check_setting("timeout_s", seconds, "setTimeout");
  comm_->session().set_timeout(seconds);
  if (fallback_) fallback_->setTimeout(timeout);
}

void FrontEnd::abort() { comm_->abort("rank " + std::to_string(getRank()) + " aborted the process group"); }

template <class Body>
c10::intrusive_ptr<c10d::Work> FrontEnd::launch(c10d::OpType type, const std::vector<at::Tensor>& outputs,
                                               Body body, bool async_op, bool blocking) {
  // A caller that waits at once (async_op=False) runs the job in its own
  // thread when the communicator is idle: no hand-off to the worker, and
  // nothing allocated for a queue. Anything asynchronous (DDP's buckets,
  // FSDP) goes to the worker, so it overlaps the caller's compute.
  const char* what = op_name(type);
  if (!async_op && comm_->run_if_idle(body, what, bytes_of(outputs))) {
    if (blocking) return {};
    Job done;
    done.outputs = outputs;
    auto item = std::make_shared<WorkItem>(std::move(done));
    item->finish(nullptr);
    return c10::make_intrusive<Work>(getRank(), type, std::move(item));
  }
  Job job;
  job.body = std::move(body);
  job.outputs = outputs;
  return launch(type, std::move(job), /*async_op=*/true, blocking);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::launch(c10d::OpType type, Job job, bool async_op, bool blocking) {
  job.what = op_name(type);
  if (!async_op && comm_->run_if_idle(job.body, job.what, bytes_of(job.outputs))) {
    if (blocking) return {};
    auto item = std::make_shared<WorkItem>(std::move(job));
    item->finish(nullptr);
    return c10::make_intrusive<Work>(getRank(), type, std::move(item));
  }
  job.blocking = blocking;
  std::shared_ptr<WorkItem> item = comm_->enqueue(std::move(job));
  if (blocking) {
    item->wait();
    return {};
  }
  return c10::make_intrusive<Work>(getRank(), type, std::move(item), comm_);
}

c10d::Backend& FrontEnd::fallback() {
  comm_->flush();
  return *fallback_;
}

// ---------------------------------------------------------------- all_reduce, broadcast, reduce

c10::intrusive_ptr<c10d::Work> FrontEnd::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  return all_reduce(tensors, opts, AllReduceCall());
}

c10::intrusive_ptr<c10d::Work> FrontEnd::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  AllReduceCall call;
  call.coalesced = true;
  return all_reduce(tensors, opts, call);
}

namespace {

// The fallback's answer where there is no fallback (pycomm.all_reduce on one
// host): the argument's own error. What pycomm does not run is a sparse or
// otherwise non-strided tensor, or a CUDA tensor its kernels do not take.
[[noreturn]] void refuse_without_fallback(const std::vector<at::Tensor>& tensors, core::ReduceOp op) {
  for (const auto& t : tensors) check_tensor(t, "tensor", /*cuda_ok=*/true);
  const at::Tensor& t = tensors.at(0);
  TORCH_CHECK_TYPE(t.is_contiguous(), "tensor: the CUDA all-reduce takes contiguous tensors, got sizes ",
                   t.sizes(), " and strides ", t.strides(), "; dist.all_reduce on a pycomm group takes it");
  TORCH_CHECK_TYPE(false, "tensor: the CUDA all-reduce takes float32, float64, float16, bfloat16, int8, "
                   "uint8, int32 and int64 tensors (sum, avg, max, min, product), not ",
                   torch_dtype_name(t.scalar_type()), " with '", core::op_name(op),
                   "'; dist.all_reduce on a pycomm group takes it");
}

// An all-reduce job: each tensor in turn, in place, staged if not contiguous.
// (Room for one tensor inline: a blocking call on an idle communicator runs
// it in the caller's thread, where an allocation is a share of its cost.)
struct AllReduceBody {
  std::shared_ptr<const Plan> plan;
  c10::SmallVector<StagedTensor, 1> tensors;
  c10::SmallVector<core::Algorithm, 1> algorithms;  // the routing table's, one per tensor
  core::ReduceOp op;
  bool premul;
  double factor;
  bool restore;

  void operator()(const core::Context& ctx) const {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const StagedTensor& s = tensors[i];
      s.copy_in();
      const at::Tensor& t = s.flat();
      if (premul) t.mul_(factor);
      plan->all_reduce(ctx, t, op, algorithms[i], restore);
      s.copy_out();
    }
  }
};

}  // namespace

c10::intrusive_ptr<c10d::Work> FrontEnd::all_reduce(std::vector<at::Tensor>& tensors,
                                                   const c10d::AllreduceOptions& opts,
                                                   const AllReduceCall& call) {
  const core::PartTimer timed = enter();
  const Reduction red = reduction_of(opts.reduceOp);
  const core::RouteQuery q = query(core::Collective::kAllReduce, where_of(tensors), red, call.algorithm);
  const core::Route route = route_of(q, tensors.empty() ? at::Tensor() : tensors[0]);
  if (route.runner == core::Runner::kFallback) {
    if (!fallback_) refuse_without_fallback(tensors, red.op);
    c10::intrusive_ptr<c10d::Work> work;
    if (call.coalesced) {
      c10d::AllreduceCoalescedOptions o;
      static_cast<c10d::AllreduceOptions&>(o) = opts;
      work = fallback().allreduce_coalesced(tensors, o);
    } else {
      work = fallback().allreduce(tensors, opts);
    }
    if (!call.blocking) return work;
    work->wait();
    return {};
  }
  if (!call.coalesced) single_tensor(tensors, "tensor");
  if (route.runner == core::Runner::kCuda) {
    return cuda_all_reduce(tensors, red, algorithms_of(q, route, tensors), opts.asyncOp, call.blocking);
  }
  AllReduceBody body{plan_, {}, {}, red.op, red.premul, red.factor, call.restore};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    check_tensor(t, "tensor");
    check_op_for_dtype(red.op, red.premul, t.scalar_type(), "tensor");
    check_writable(t, "tensor");
    body.tensors.emplace_back(t, Use::kInOut);
    body.algorithms.push_back(i == 0 ? route.algorithm : route_of(q, t).algorithm);
  }
  return launch(c10d::OpType::ALLREDUCE, tensors, std::move(body), opts.asyncOp, call.blocking);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::cuda_all_reduce(std::vector<at::Tensor>& tensors,
                                                        const Reduction& red,
                                                        std::vector<core::Algorithm> algorithms,
                                                        bool async_op, bool blocking) {
  std::vector<Job> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor& t = tensors[i];
    // The routing table sent only contiguous tensors of dtypes the kernels
    // take here (core::cuda_all_reduce_takes); complex ones as pairs of reals.
    core::AllReduceArgs a;
    check_tensor(t, "tensor", /*cuda_ok=*/true);
    check_op_for_dtype(red.op, red.premul, t.scalar_type(), "tensor");
    // On the caller's stream, before the job records where the kernel may start.
    if (red.premul) t.mul_(red.factor);
    const at::Tensor real = real_view(t);
    a.dtype = dtype_of(real);
    a.data = real.data_ptr();
    a.count = size_t(real.numel());
    a.op = red.op;
    a.algorithm = algorithms[i];
    // A CUDA all-reduce that fails part way leaves the tensor partly reduced
    // (its kernels write the output piece by piece): no restore.
    a.restore = false;
    parts.push_back(cuda_all_reduce_job(*comm_, t, "tensor", a));
  }
  if (parts.size() == 1) return launch(c10d::OpType::ALLREDUCE, std::move(parts[0]), async_op, blocking);
  Job job;
  job.outputs = tensors;
  job.devices = parts.empty() ? std::vector<c10::Device>{} : parts[0].devices;
  job.stream = parts.empty() ? std::nullopt : parts[0].stream;
  job.body = [parts = std::move(parts)](const core::Context& ctx) {
    for (const Job& p : parts) p.body(ctx);
  };
  return launch(c10d::OpType::ALLREDUCE, std::move(job), async_op, blocking);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::broadcast(std::vector<at::Tensor>& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  const core::PartTimer timed = enter();
  const core::Route route = route_of(query(core::Collective::kBroadcast, where_of(tensors), Reduction()),
                                     tensors.empty() ? at::Tensor() : tensors[0]);
  if (route.runner == core::Runner::kFallback) return fallback().broadcast(tensors, opts);
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
  const Reduction red = reduction_of(opts.reduceOp);
  const core::Route route = route_of(query(core::Collective::kReduce, where_of(tensors), red),
                                     tensors.empty() ? at::Tensor() : tensors[0]);
  if (route.runner == core::Runner::kFallback) return fallback().reduce(tensors, opts);
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
  if (route.runner == core::Runner::kFallback) return fallback()._allgather_base(output, input, opts);
  std::vector<at::Tensor> outs{output}, ins{input};
  return all_gather_tensors(outs, ins, {route.algorithm}, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const core::PartTimer timed = enter();
  const core::RouteQuery q = query(core::Collective::kAllGather, where_of(outputs, inputs), Reduction());
  const core::Route route = route_of(q, inputs.empty() ? at::Tensor() : inputs[0]);
  if (route.runner == core::Runner::kFallback) {
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
  if (route.runner == core::Runner::kFallback) return fallback().allgather(outputs, inputs, opts);
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
  if (route.runner == core::Runner::kFallback) return fallback().allgather_coalesced(outputs, inputs, opts);
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
  const Reduction red = reduction_of(opts.reduceOp);
  const core::Route route =
      route_of(query(core::Collective::kReduceScatter, where_of(output, input), red), input);
  if (route.runner == core::Runner::kFallback) return fallback()._reduce_scatter_base(output, input, opts);
  std::vector<at::Tensor> outs{output}, ins{input};
  return reduce_scatter_tensors(outs, ins, red, {route.algorithm}, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const core::PartTimer timed = enter();
  const Reduction red = reduction_of(opts.reduceOp);
  const core::RouteQuery q = query(core::Collective::kReduceScatter, where_of(outputs, inputs), red);
  const core::Route route = route_of(q, inputs.empty() ? at::Tensor() : inputs[0]);
  if (route.runner == core::Runner::kFallback) {
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
  const Reduction red = reduction_of(opts.reduceOp);
  // The input is the list concatenated: world x the output.
  const core::Route route = route_of(query(core::Collective::kReduceScatter, where_of(outputs, inputs), red),
                                     outputs.empty() ? at::Tensor() : outputs[0], getSize());
  if (route.runner == core::Runner::kFallback) return fallback().reduce_scatter(outputs, inputs, opts);
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
  if (runner_of(core::Collective::kAllToAll, where_of(output, input)) == core::Runner::kFallback) {
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
  if (runner_of(core::Collective::kAllToAll, where_of(outputs, inputs)) == core::Runner::kFallback) {
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
  if (route.runner == core::Runner::kFallback) return fallback().gather(outputs, inputs, opts);
  const at::Tensor& in = single_tensor(inputs, "tensor");
  check_tensor(in, "tensor");
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
    for (const auto& o : list) {
      check_like(o, "gather_list[i]", in.scalar_type(), in.numel(), "tensor");
      check_writable(o, "gather_list[i]");
    }
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                      "gather_list: only the destination rank (dst=", root, ") takes one");
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
  if (route.runner == core::Runner::kFallback) return fallback().scatter(outputs, inputs, opts);
  const at::Tensor& out = single_tensor(outputs, "tensor");
  check_tensor(out, "tensor");
  check_writable(out, "tensor");
  check_root(opts.rootRank, getSize(), "src");
  const int root = int(opts.rootRank);
  std::vector<at::Tensor> list;
  if (root == getRank()) {
    TORCH_CHECK_VALUE(inputs.size() == 1, "scatter_list: expected one list on the source rank");
    list = inputs[0];
    TORCH_CHECK_VALUE(int64_t(list.size()) == getSize(), "scatter_list: expected ", getSize(),
                      " tensors (the world size), got ", list.size());
    for (const auto& t : list) check_like(t, "scatter_list[i]", out.scalar_type(), out.numel(), "tensor");
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                      "scatter_list: only the source rank (src=", root, ") takes one");
  }
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

// ---------------------------------------------------------------- point-to-point

namespace {

// What a send or receive completes: its Future, made only when someone asks.
// dist.send and dist.recv never do, and a Future made and completed with its
// list of tensors on every call would be a share of a small message's cost
// that nobody uses. The operation may complete on the engine's helper before
// or after getFuture().
class P2PCompletion {
 public:
  // `staged`: a receive into a tensor that is not contiguous, written back
  // through the caller's view before anyone sees the operation complete.
  P2PCompletion(std::vector<at::Tensor> tensors, std::optional<StagedTensor> staged)
      : tensors_(std::move(tensors)), staged_(std::move(staged)) {}

  const std::vector<at::Tensor>& tensors() const { return tensors_; }

  // Once, by whichever comes first after the engine finished the operation:
  // its on_done, a wait() or an is_completed() (the engine marks an operation
  // finished before it runs on_done, outside its lock). Later callers wait
  // for the first. Returns the copy's error, if any.
  std::exception_ptr copy_out() {
    if (!staged_) return nullptr;
    std::call_once(copied_, [this] {
      try {
        staged_->copy_out();
      } catch (...) {
        copy_error_ = std::current_exception();
      }
    });
    return copy_error_;
  }

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
  const std::optional<StagedTensor> staged_;
  std::once_flag copied_;
  std::exception_ptr copy_error_;  // written inside copied_'s call, read after it
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
    if (!op_->done()) {
      comm_->p2p().help(op_);
      if (!op_->done()) return false;
    }
    completion_->copy_out();
    return true;
  }
  bool isSuccess() const override { return op_->done() && !op_->error(); }
  std::exception_ptr exception() const override { return op_->error(); }
  // The engine's deadline (posted + the group's timeout) bounds the wait.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    const core::PartTimer timed(core::CallPart::kCall, /*counts=*/false);
    comm_->p2p().wait(op_);
    if (std::exception_ptr e = completion_->copy_out()) std::rethrow_exception(e);
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

c10::intrusive_ptr<c10d::Work> FrontEnd::point_to_point(core::P2POp::Kind kind,
                                                       std::vector<at::Tensor>& tensors, int peer,
                                                       int tag) {
  const core::PartTimer timed(core::CallPart::kCall);
  const bool sends = kind == core::P2POp::Kind::kSend;
  const at::Tensor& t = single_tensor(tensors, "tensor");
  // Bytes move as they are, so every dtype goes. A tensor that is not
  // contiguous is staged: a send's copy is made now (a send reads its tensor
  // when posted, as far as the caller can tell), a receive's written back
  // through the caller's view before the operation completes.
  check_tensor(t, "tensor");
  if (!sends) check_writable(t, "tensor");
  std::optional<StagedTensor> staged;
  if (StagedTensor::needed(t)) {
    staged.emplace(t, sends ? Use::kIn : Use::kOut);
    staged->copy_in();
  }
  if (peer != core::P2POp::kAnySource) {
    TORCH_CHECK_VALUE(peer >= 0 && peer < getSize() && peer != getRank(), sends ? "dst" : "src",
                      ": rank ", peer, " is not a peer of rank ", getRank(), " in this group of ",
                      getSize());
  }
  auto op = std::make_shared<core::P2POp>();
  op->kind = kind;
  op->peer = peer;
  op->tag = tag;
  op->data = static_cast<char*>(staged ? staged->flat().data_ptr() : t.data_ptr());
  op->bytes = t.nbytes();
  op->type = uint32_t(t.scalar_type());
  // It holds the tensors until the operation completes, even if the Work is dropped.
  // (A send's staging buffer is held by the completion too: the engine reads it until done.)
  auto completion = std::make_shared<P2PCompletion>(tensors, std::move(staged));
  op->on_done = [completion](const core::P2POp& o) {
    std::exception_ptr error = o.error();
    if (!error) error = completion->copy_out();
    completion->complete(error);
  };
  comm_->p2p().post(op);
  return c10::make_intrusive<P2PWork>(getRank(), sends ? c10d::OpType::SEND : c10d::OpType::RECV, comm_,
                                      std::move(op), std::move(completion));
}

c10::intrusive_ptr<c10d::Work> FrontEnd::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  if (runner_of(core::Collective::kSend, where_of(tensors)) == core::Runner::kFallback) {
    return fallback().send(tensors, dst, tag);
  }
  return point_to_point(core::P2POp::Kind::kSend, tensors, dst, tag);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  if (runner_of(core::Collective::kRecv, where_of(tensors)) == core::Runner::kFallback) {
    return fallback().recv(tensors, src, tag);
  }
  return point_to_point(core::P2POp::Kind::kRecv, tensors, src, tag);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  if (runner_of(core::Collective::kRecv, where_of(tensors)) == core::Runner::kFallback) {
    return fallback().recvAnysource(tensors, tag);
  }
  return point_to_point(core::P2POp::Kind::kRecv, tensors, core::P2POp::kAnySource, tag);
}

// ---------------------------------------------------------------- the fallback's

void FrontEnd::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  const core::PartTimer timed = enter();
  fallback().monitoredBarrier(opts, wait_all_ranks);
}

}  // namespace pycomm
