#include "tensor_checks.h"

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include "dtype_map.h"

namespace pycomm {

void check_tensor(const at::Tensor& t, const char* arg, bool cuda_ok) {
  TORCH_CHECK_TYPE(t.defined(), arg, ": expected a tensor, got an undefined tensor");
  TORCH_CHECK_TYPE(t.layout() == at::kStrided, arg,
                   ": sparse and other non-strided layouts are not supported, got ", t.layout());
  TORCH_CHECK_TYPE(t.device().is_cpu() || (cuda_ok && t.device().is_cuda()), arg,
                   cuda_ok ? ": expected a CPU or CUDA tensor, got device "
                           : ": expected a CPU tensor (the shared-memory transport), got device ",
                   t.device());
}

void check_writable(const at::Tensor& t, const char* arg) {
  TORCH_CHECK_VALUE(at::has_internal_overlap(t) != at::MemOverlap::Yes, arg,
                    ": is written, but some of its elements share memory (sizes ", t.sizes(),
                    ", strides ", t.strides(), ": an expanded view?); pass a tensor of its own");
}

const at::Tensor& single_tensor(const std::vector<at::Tensor>& ts, const char* arg) {
  TORCH_CHECK_VALUE(ts.size() == 1, arg, ": expected exactly one tensor (one device per rank), got ",
                    ts.size());
  return ts[0];
}

void check_like(const at::Tensor& t, const char* arg, at::ScalarType dtype, int64_t numel,
                const char* reference) {
  check_tensor(t, arg);
  TORCH_CHECK_TYPE(t.scalar_type() == dtype, arg, ": dtype ", torch_dtype_name(t.scalar_type()),
                   " differs from ", reference, "'s ", torch_dtype_name(dtype));
  TORCH_CHECK_VALUE(t.numel() == numel, arg, ": expected ", numel, " elements (from ", reference,
                    "), got ", t.numel());
}

void check_all_gather_pairs(const std::vector<at::Tensor>& outputs,
                            const std::vector<at::Tensor>& inputs, int world) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "output_tensors: ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], "input_tensor");
    check_like(outputs[i], "output_tensor", inputs[i].scalar_type(), inputs[i].numel() * world,
               "input_tensor x world size");
    check_writable(outputs[i], "output_tensor");
  }
}

void check_all_gather_lists(const std::vector<std::vector<at::Tensor>>& outputs,
                            const std::vector<at::Tensor>& inputs, int world) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "output_tensor_lists: ", outputs.size(),
                    " lists for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], "input_tensor");
    TORCH_CHECK_VALUE(int64_t(outputs[i].size()) == world, "tensor_list: expected ", world,
                      " tensors (the world size), got ", outputs[i].size());
    for (const auto& o : outputs[i]) {
      check_like(o, "tensor_list[i]", inputs[i].scalar_type(), inputs[i].numel(), "input_tensor");
      check_writable(o, "tensor_list[i]");
    }
  }
}

void check_reduce_scatter_pairs(const std::vector<at::Tensor>& outputs,
                                const std::vector<at::Tensor>& inputs, int world,
                                core::ReduceOp op, bool premul) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "output: ", outputs.size(), " outputs for ",
                    inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(outputs[i], "output");
    check_op_for_dtype(op, premul, outputs[i].scalar_type(), "output");
    check_like(inputs[i], "input", outputs[i].scalar_type(), outputs[i].numel() * world,
               "output x world size");
    check_writable(outputs[i], "output");
  }
}

void check_reduce_scatter_list(const std::vector<at::Tensor>& outputs,
                               const std::vector<std::vector<at::Tensor>>& inputs, int world,
                               core::ReduceOp op, bool premul) {
  const at::Tensor& out = single_tensor(outputs, "output");
  TORCH_CHECK_VALUE(inputs.size() == 1, "input_list: expected one list (one device per rank)");
  TORCH_CHECK_VALUE(int64_t(inputs[0].size()) == world, "input_list: expected ", world,
                    " tensors (the world size), got ", inputs[0].size());
  check_tensor(out, "output");
  for (const auto& t : inputs[0]) {
    check_like(t, "input_list[i]", out.scalar_type(), out.numel(), "output");
  }
  check_op_for_dtype(op, premul, out.scalar_type(), "output");
  check_writable(out, "output");
}

void check_all_to_all_single(const at::Tensor& output, const at::Tensor& input) {
  check_tensor(input, "input");
  check_like(output, "output", input.scalar_type(), output.numel(), "input");
  check_writable(output, "output");
}

void check_all_to_all_lists(const std::vector<at::Tensor>& outputs,
                            const std::vector<at::Tensor>& inputs, int world) {
  TORCH_CHECK_VALUE(int64_t(inputs.size()) == world && int64_t(outputs.size()) == world,
                    "input_tensor_list, output_tensor_list: expected ", world,
                    " tensors each (the world size), got ", inputs.size(), " and ", outputs.size());
  check_tensor(inputs[0], "input_tensor_list[0]");
  const at::ScalarType dtype = inputs[0].scalar_type();
  for (int r = 0; r < world; ++r) {
    check_like(inputs[size_t(r)], "input_tensor_list[i]", dtype, inputs[size_t(r)].numel(),
               "input_tensor_list[0]");
    check_like(outputs[size_t(r)], "output_tensor_list[i]", dtype, outputs[size_t(r)].numel(),
               "input_tensor_list[0]");
    check_writable(outputs[size_t(r)], "output_tensor_list[i]");
  }
}

void check_op_for_dtype(core::ReduceOp op, bool premul, at::ScalarType dtype, const char* arg) {
  check_op_for_dtype(op, premul, core_dtype(dtype), dtype, arg);
}

void check_op_for_dtype(core::ReduceOp op, bool premul, core::DType d, at::ScalarType dtype, const char* arg) {
  const std::string name = torch_dtype_name(dtype);
  const char* op_name = premul ? "premul_sum" : core::op_name(op);
  // float8 and the like: gloo takes none of them, torch's CPU kernels do not
  // add them, and no rule for rounding sums of them is pycomm's to invent.
  TORCH_CHECK_TYPE(core::is_reducible(d), arg, ": ", name, " tensors have no arithmetic here, so '",
                   op_name, "' cannot reduce them (gloo refuses them too); collectives that only "
                   "move data (broadcast, all_gather, all_to_all, gather, scatter, send) take them");
  if (at::isComplexType(dtype)) {
    // Complex values reduce as pairs of reals, which is right for sums only
    // (torch.distributed's rule: max(2+3i, 3+2i) is no value of either).
    TORCH_CHECK_VALUE(op == core::ReduceOp::kSum || op == core::ReduceOp::kAvg, "op: '", op_name,
                      "' is not defined for complex tensors (", arg, " is ", name,
                      "); sum, avg and premul_sum are");
    return;
  }
  if (core::is_bitwise(op)) {
    TORCH_CHECK_VALUE(!core::is_floating(d), "op: '", op_name,
                      "' is defined for integer and bool tensors only (", arg, " is ", name, ")");
    return;
  }
  // gloo refuses integer AVG (it cannot cast the quotient back); a rounding
  // rule would have to be invented, so ask for an explicit sum instead.
  TORCH_CHECK_VALUE(op != core::ReduceOp::kAvg || core::is_floating(d), "op: '", op_name,
                    "' is not defined for integer and bool tensors (", arg, " is ", name,
                    "); use sum and divide");
  TORCH_CHECK_VALUE(!premul || core::is_floating(d),
                    "op: premul_sum is not defined for integer and bool tensors (", arg, " is ",
                    name, ")");
}

}  // namespace pycomm
