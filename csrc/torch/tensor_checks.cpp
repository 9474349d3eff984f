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
