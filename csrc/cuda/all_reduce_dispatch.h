// The one place where a CUDA all-reduce's (dtype, op) become the element type
// and Reduction (all_reduce_elements.h) that the kernel bodies are templates
// of. Used by the launcher (cuda_all_reduce.cu) and the CPU protocol test.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../core/dtypes.h"
#include "../core/kernels/half_convert.h"
#include "all_reduce_elements.h"

namespace pycomm::cuda {

// Calls f(T{}, R{}); false, without calling it, for an unsupported pair
// (avg of integers, a dtype or op these kernels do not take).
template <class F>
bool dispatch_reduction(core::DType dtype, core::ReduceOp op, F&& f) {
  auto with_type = [&](auto type) -> bool {
    using T = decltype(type);
    switch (op) {
      case core::ReduceOp::kSum: f(type, Reduction<SumOp, false>{}); return true;
      case core::ReduceOp::kAvg:
        if constexpr (std::is_integral_v<T>) {
          return false;
        } else {
          f(type, Reduction<SumOp, true>{});
          return true;
        }
      case core::ReduceOp::kMax: f(type, Reduction<MaxOp, false>{}); return true;
      case core::ReduceOp::kMin: f(type, Reduction<MinOp, false>{}); return true;
      case core::ReduceOp::kProduct: f(type, Reduction<ProductOp, false>{}); return true;
      case core::ReduceOp::kBand:
      case core::ReduceOp::kBor:
      case core::ReduceOp::kBxor: return false;  // the fallback's (core::cuda_all_reduce_takes)
    }
    return false;
  };
  switch (dtype) {
    case core::DType::kFloat32: return with_type(float{});
    case core::DType::kFloat64: return with_type(double{});
    case core::DType::kFloat16: return with_type(core::Half{});
    case core::DType::kBFloat16: return with_type(core::BFloat16{});
    case core::DType::kInt8: return with_type(int8_t{});
    case core::DType::kUInt8: return with_type(uint8_t{});
    case core::DType::kInt32: return with_type(int32_t{});
    case core::DType::kInt64: return with_type(int64_t{});
    // The host's kernels take these; CUDA tensors of them take the fallback
    // (core::cuda_all_reduce_takes, which test_cuda_protocol.cpp holds to this).
    case core::DType::kBool:
    case core::DType::kInt16:
    case core::DType::kUInt16:
    case core::DType::kUInt32:
    case core::DType::kUInt64: return false;
  }
  return false;
}

}  // namespace pycomm::cuda
