#include "tensor_checks.h"

#include <c10/util/Exception.h>

#include "dtype_map.h"

namespace pycomm {

core::DType check_tensor(const at::Tensor& t, const char* arg, bool cuda_ok) {
  TORCH_CHECK_TYPE(t.defined(), arg, ": expected a tensor, got an undefined tensor");
  TORCH_CHECK_TYPE(t.layout() == at::kStrided, arg,
                   ": sparse and other non-strided layouts are not supported, got ", t.layout());
  TORCH_CHECK_TYPE(t.device().is_cpu() || (cuda_ok && t.device().is_cuda()), arg,
                   cuda_ok ? ": expected a CPU or CUDA tensor, got device "
                           : ": expected a CPU tensor (the shared-memory transport), got device ",
                   t.device());
  core::DType dtype;
  TORCH_CHECK_TYPE(to_core_dtype(t.scalar_type(), &dtype), arg, ": unsupported dtype ",
                   t.scalar_type(), "; supported: ", kSupportedDtypes);
  TORCH_CHECK_VALUE(t.is_contiguous(), arg, ": must be contiguous, got sizes ", t.sizes(),
                    " and strides ", t.strides());
  TORCH_CHECK_VALUE(!t.is_conj() && !t.is_neg(), arg, ": resolve conj/neg views first");
  return dtype;
}

const at::Tensor& single_tensor(const std::vector<at::Tensor>& ts, const char* arg) {
  TORCH_CHECK_VALUE(ts.size() == 1, arg, ": expected exactly one tensor (one device per rank), got ",
                    ts.size());
  return ts[0];
}

void check_like(const at::Tensor& t, const char* arg, core::DType dtype, int64_t numel,
                const char* reference) {
  const core::DType d = check_tensor(t, arg);
  TORCH_CHECK_TYPE(d == dtype, arg, ": dtype ", core::dtype_name(d), " differs from ", reference,
                   "'s ", core::dtype_name(dtype));
  TORCH_CHECK_VALUE(t.numel() == numel, arg, ": expected ", numel, " elements (from ", reference,
                    "), got ", t.numel());
}

std::vector<core::DType> check_all_gather_pairs(const std::vector<at::Tensor>& outputs,
                                                const std::vector<at::Tensor>& inputs, int world) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "output_tensors: ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  std::vector<core::DType> dtypes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    dtypes.push_back(check_tensor(inputs[i], "input_tensor"));
    check_like(outputs[i], "output_tensor", dtypes.back(), inputs[i].numel() * world,
               "input_tensor x world size");
  }
  return dtypes;
}

std::vector<core::DType> check_all_gather_lists(
    const std::vector<std::vector<at::Tensor>>& outputs, const std::vector<at::Tensor>& inputs,
    int world) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "output_tensor_lists: ", outputs.size(),
                    " lists for ", inputs.size(), " inputs");
  std::vector<core::DType> dtypes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    dtypes.push_back(check_tensor(inputs[i], "input_tensor"));
    TORCH_CHECK_VALUE(int64_t(outputs[i].size()) == world, "tensor_list: expected ", world,
                      " tensors (the world size), got ", outputs[i].size());
    for (const auto& o : outputs[i]) {
      check_like(o, "tensor_list[i]", dtypes.back(), inputs[i].numel(), "input_tensor");
    }
  }
  return dtypes;
}

std::vector<core::DType> check_reduce_scatter_pairs(const std::vector<at::Tensor>& outputs,
                                                    const std::vector<at::Tensor>& inputs, int world,
                                                    core::ReduceOp op, bool premul) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "output: ", outputs.size(), " outputs for ",
                    inputs.size(), " inputs");
  std::vector<core::DType> dtypes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    dtypes.push_back(check_tensor(outputs[i], "output"));
    check_op_for_dtype(op, premul, dtypes.back());
    check_like(inputs[i], "input", dtypes.back(), outputs[i].numel() * world,
               "output x world size");
  }
  return dtypes;
}

core::DType check_reduce_scatter_list(const std::vector<at::Tensor>& outputs,
                                      const std::vector<std::vector<at::Tensor>>& inputs,
                                      int world, core::ReduceOp op, bool premul) {
  const at::Tensor& out = single_tensor(outputs, "output");
  TORCH_CHECK_VALUE(inputs.size() == 1, "input_list: expected one list (one device per rank)");
  TORCH_CHECK_VALUE(int64_t(inputs[0].size()) == world, "input_list: expected ", world,
                    " tensors (the world size), got ", inputs[0].size());
  const core::DType dtype = check_tensor(out, "output");
  for (const auto& t : inputs[0]) check_like(t, "input_list[i]", dtype, out.numel(), "output");
  check_op_for_dtype(op, premul, dtype);
  return dtype;
}

core::DType check_all_to_all_single(const at::Tensor& output, const at::Tensor& input) {
  const core::DType dtype = check_tensor(input, "input");
  check_like(output, "output", dtype, output.numel(), "input");
  return dtype;
}

core::DType check_all_to_all_lists(const std::vector<at::Tensor>& outputs,
                                   const std::vector<at::Tensor>& inputs, int world) {
  TORCH_CHECK_VALUE(int64_t(inputs.size()) == world && int64_t(outputs.size()) == world,
                    "input_tensor_list, output_tensor_list: expected ", world,
                    " tensors each (the world size), got ", inputs.size(), " and ", outputs.size());
  const core::DType dtype = check_tensor(inputs[0], "input_tensor_list[0]");
  for (int r = 0; r < world; ++r) {
    check_like(inputs[size_t(r)], "input_tensor_list[i]", dtype, inputs[size_t(r)].numel(),
               "input_tensor_list[0]");
    check_like(outputs[size_t(r)], "output_tensor_list[i]", dtype, outputs[size_t(r)].numel(),
               "input_tensor_list[0]");
  }
  return dtype;
}

void check_op_for_dtype(core::ReduceOp op, bool premul, core::DType dtype) {
  // gloo rejects AVG outright and once computed something else for it; for
  // integers a rounding rule would have to be invented, so ask for an
  // explicit sum instead.
  TORCH_CHECK_VALUE(op != core::ReduceOp::kAvg || core::is_floating(dtype), "op: '",
                    core::op_name(op), "' is not defined for integer tensors (dtype ",
                    core::dtype_name(dtype), "); use sum and divide");
  TORCH_CHECK_VALUE(!premul || core::is_floating(dtype),
                    "op: premul_sum is not defined for integer tensors (dtype ",
                    core::dtype_name(dtype), ")");
}

}  // namespace pycomm
