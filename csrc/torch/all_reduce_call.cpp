#include "all_reduce_call.h"

#include <c10/util/Exception.h>

#include "dtype_map.h"
#include "torch_compat.h"

namespace pycomm {

Reduction Reduction::of(const c10d::ReduceOp& op) {
  Reduction r;
  r.native = to_core_op(op, &r.op, &r.premul);
  if (r.premul) {
    auto* s = dynamic_cast<PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK_VALUE(s != nullptr, "op: premul_sum without its factor");
    r.factor = s->tensor_factor.defined() ? s->tensor_factor.item<double>() : s->double_factor;
  }
  return r;
}

Reduction Reduction::named(const std::string& name, const char* prefix) {
  Reduction r;
  TORCH_CHECK_VALUE(to_core_op(name, &r.op), prefix, "op: unknown reduction '", name, "'; expected one of ",
                    joined_names(core::kReduceOps, core::op_name));
  return r;
}

core::Algorithm all_reduce_algorithm_named(const std::string& name) {
  core::Algorithm a;
  TORCH_CHECK_VALUE(to_core_algorithm(name, &a), "algorithm: unknown algorithm '", name,
                    "'; expected one of ", joined_names(core::kAllReduceAlgorithms, core::algorithm_name),
                    " (two_shot: CUDA tensors only, two_level and single_copy: CPU tensors only)");
  return a;
}

}  // namespace pycomm
