// torch.ops.pycomm.all_reduce_(tensor, op, group_name): an in-place all-reduce
// over a c10d group, one dispatcher op that returns when it is done. It is the
// op a model calls once a layer (vLLM's and SGLang's CPU models each carry a
// private one): no Work, no Future and no registry entry is made, and its fake
// kernel lets torch.compile keep it inside a graph.
//
// On a group whose backend is pycomm's, it enters the front-end's all-reduce
// entry (the one dist.all_reduce takes) as a blocking call, so an idle
// communicator runs it in the caller's thread. On any other group (gloo, NCCL)
// it is that group's all_reduce, waited for: a model written against the op
// runs on every backend.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/library.h>

#include <string>

#include "all_reduce_op.h"
#include "dtype_map.h"
#include "frontend.h"

namespace pycomm {

void all_reduce_on_group(at::Tensor& tensor, core::ReduceOp op, const std::string& group_name,
                         const char* caller) {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  try {
    group = c10d::resolve_process_group(group_name);
  } catch (const c10::Error&) {
    C10_THROW_ERROR(ValueError, c10::str(caller, ": group_name: no process group is registered as '",
                                         group_name, "' (pass group.group_name of a live group)"));
  }
  std::vector<at::Tensor> tensors{tensor};
  const c10::intrusive_ptr<c10d::Backend> backend = group->getBackend(tensor.device().type());
  if (auto* front = dynamic_cast<FrontEnd*>(backend.get())) {
    // Blocking, with the communicator's restore_on_failure (none stated).
    AllReduceCall call;
    call.reduction.op = op;
    call.blocking = true;
    front->all_reduce_call(tensors, std::move(call));
  } else {
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d_op_of(op);
    group->allreduce(tensors, opts)->wait();
  }
}

namespace {

void all_reduce_(at::Tensor& tensor, const std::string& op, const std::string& group_name) {
  all_reduce_on_group(tensor, Reduction::named(op, "all_reduce_: ").op, group_name, "all_reduce_");
}

// What torch.compile traces with: the tensor keeps its shape and dtype
// (FakeTensor runs the Meta kernel of an op that has no Python one).
void all_reduce_meta(at::Tensor& /*tensor*/, const std::string& /*op*/, const std::string& /*group_name*/) {}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pycomm, m) {
  // Returns nothing: functionalization (torch.compile) takes a custom op that
  // mutates its input only when it returns no alias of it.
  m.def("all_reduce_(Tensor(a!) tensor, str op, str group_name) -> ()");
}
TORCH_LIBRARY_IMPL(pycomm, CPU, m) { m.impl("all_reduce_", &all_reduce_); }
TORCH_LIBRARY_IMPL(pycomm, CUDA, m) { m.impl("all_reduce_", &all_reduce_); }
TORCH_LIBRARY_IMPL(pycomm, Meta, m) { m.impl("all_reduce_", &all_reduce_meta); }

}  // namespace pycomm
