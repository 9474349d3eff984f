// FrontEnd's all-reduce: c10d's allreduce and allreduce_coalesced, and the one
// entry every way in meets (all_reduce_call), where the call's decisions are
// made once (resolve: all_reduce_call.h) and handed to a plan, the CUDA path
// or the fallback.
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <optional>

#include "cuda_path.h"
#include "dtype_map.h"
#include "frontend.h"
#include "queued_work.h"
#include "staged_tensor.h"
#include "symmetric_memory.h"
#include "tensor_checks.h"

namespace pycomm {

c10::intrusive_ptr<c10d::Work> FrontEnd::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  AllReduceCall call;
  call.reduction = Reduction::of(opts.reduceOp);
  call.restore = false;
  call.async_op = opts.asyncOp;
  call.options = &opts;
  return all_reduce_call(tensors, std::move(call));
}

c10::intrusive_ptr<c10d::Work> FrontEnd::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  AllReduceCall call;
  call.reduction = Reduction::of(opts.reduceOp);
  call.restore = false;
  call.async_op = opts.asyncOp;
  call.coalesced = true;
  call.options = &opts;
  return all_reduce_call(tensors, std::move(call));
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
  c10::SmallVector<AllReduceStep, 1> steps;  // the call's, one per tensor
  bool premul;
  double factor;

  void operator()(const core::Context& ctx) const {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const StagedTensor& s = tensors[i];
      s.copy_in();
      const at::Tensor& t = s.flat();
      if (premul) t.mul_(factor);
      plan->all_reduce(ctx, t, steps[i]);
      s.copy_out();
    }
  }
};

}  // namespace

bool FrontEnd::symmetric(const core::RouteQuery& q, const at::Tensor& t, SymmetricPlace* place) const {
  // A staged tensor is reduced in a copy, which lies in no symmetric memory.
  return q.hosts == 1 && !q.cuda && !q.sparse && t.defined() && symmetric_place(t, comm_->session(), place) &&
         !StagedTensor::needed(t);
}

void FrontEnd::resolve(const std::vector<at::Tensor>& tensors, AllReduceCall& call) const {
  const Reduction& red = call.reduction;
  // The route: what runs the call, from its first tensor (the query maps its
  // dtype to the core's, once); each tensor's algorithm by its own size.
  core::RouteQuery q = query(core::Collective::kAllReduce, where_of(tensors), red, call.requested);
  const at::Tensor first = tensors.empty() ? at::Tensor() : tensors[0];
  SymmetricPlace first_place;
  q.symmetric = symmetric(q, first, &first_place);
  const core::Route first_route = route_of(q, first);
  call.plan = first_route.plan;
  if (call.plan == core::PlanKind::kFallback) return;
  if (!call.coalesced) single_tensor(tensors, "tensor");
  const bool cuda = call.plan == core::PlanKind::kCuda;
  // The default is decided here alone. A CUDA all-reduce that fails part way
  // leaves the tensor partly reduced (its kernels write the output piece by
  // piece): no restore.
  const bool restore = !cuda && call.restore.value_or(comm_->config().tuning.restore_on_failure);
  call.steps.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    // The routing table sent only contiguous CUDA tensors of dtypes the
    // kernels take here (core::cuda_all_reduce_takes); complex ones as pairs
    // of reals.
    check_tensor(t, "tensor", /*cuda_ok=*/cuda);
    AllReduceStep s;
    s.op = red.op;
    s.restore = restore;
    s.dtype = i == 0 ? q.dtype : core_dtype(t.scalar_type());
    check_op_for_dtype(red.op, red.premul, s.dtype, t.scalar_type(), "tensor");
    if (!cuda) check_writable(t, "tensor");
    if (i == 0) {
      s.algorithm = first_route.algorithm;
      if (q.symmetric) s.symmetric = std::move(first_place);
    } else {
      q.dtype = s.dtype;
      q.symmetric = symmetric(q, t, &s.symmetric);
      s.algorithm = route_of(q, t).algorithm;
    }
    call.steps.push_back(std::move(s));
  }
}

template <class Body>
c10::intrusive_ptr<c10d::Work> FrontEnd::launch(c10d::OpType type, const std::vector<at::Tensor>& outputs,
                                               Body body, bool async_op, bool blocking) {
  // A caller that waits at once (async_op=False) runs the job in its own
  // thread when the communicator is idle: no hand-off to the worker, and
  // nothing allocated for a queue. Anything asynchronous (DDP's buckets,
  // FSDP) goes to the worker, so it overlaps the caller's compute.
  if (!async_op && comm_->run_if_idle(body, job_name(type), bytes_of(outputs))) {
    if (blocking) return {};
    Job done;
    done.outputs = outputs;
    return finished(type, std::move(done));
  }
  Job job;
  job.body = std::move(body);
  job.outputs = outputs;
  return launch(type, std::move(job), /*async_op=*/true, blocking);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::all_reduce_call(std::vector<at::Tensor>& tensors, AllReduceCall call) {
  const core::PartTimer timed = enter();
  resolve(tensors, call);
  if (call.plan == core::PlanKind::kFallback) return fallback_all_reduce(tensors, call);
  if (call.plan == core::PlanKind::kCuda) return cuda_all_reduce(tensors, call);
  AllReduceBody body{plan_, {}, std::move(call.steps), call.reduction.premul, call.reduction.factor};
  for (const at::Tensor& t : tensors) body.tensors.emplace_back(t, StagedTensor::Use::kInOut);
  return launch(c10d::OpType::ALLREDUCE, tensors, std::move(body), call.async_op, call.blocking);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::fallback_all_reduce(std::vector<at::Tensor>& tensors,
                                                            const AllReduceCall& call) {
  if (!fallback_) refuse_without_fallback(tensors, call.reduction.op);
  std::optional<c10d::AllreduceOptions> made;
  if (!call.options) {
    made.emplace();
    made->reduceOp = c10d_op_of(call.reduction.op);
    made->asyncOp = call.async_op;
  }
  const c10d::AllreduceOptions& opts = call.options ? *call.options : *made;
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

c10::intrusive_ptr<c10d::Work> FrontEnd::cuda_all_reduce(std::vector<at::Tensor>& tensors, AllReduceCall& call) {
  const Reduction& red = call.reduction;
  std::vector<Job> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor& t = tensors[i];
    // On the caller's stream, before the job records where the kernel may start.
    if (red.premul) t.mul_(red.factor);
    const core::AllReduceArgs a = all_reduce_args(call.steps[i], real_view(t));
    parts.push_back(cuda_all_reduce_job(*comm_, t, "tensor", a));
  }
  if (parts.size() == 1) return launch(c10d::OpType::ALLREDUCE, std::move(parts[0]), call.async_op, call.blocking);
  Job job;
  job.outputs = tensors;
  job.devices = parts.empty() ? std::vector<c10::Device>{} : parts[0].devices;
  job.stream = parts.empty() ? std::nullopt : parts[0].stream;
  job.body = [parts = std::move(parts)](const core::Context& ctx) {
    for (const Job& p : parts) p.body(ctx);
  };
  return launch(c10d::OpType::ALLREDUCE, std::move(job), call.async_op, call.blocking);
}

}  // namespace pycomm
