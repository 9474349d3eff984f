// The one place where torch's dtypes and reduction names meet the core's.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include "../core/collective.h"
#include "../core/dtypes.h"

namespace pycomm {

// Returns false for a dtype the core cannot reduce.
inline bool to_core_dtype(at::ScalarType t, core::DType* out) {
  switch (t) {
    case at::kFloat: *out = core::DType::kFloat32; return true;
    case at::kDouble: *out = core::DType::kFloat64; return true;
    case at::kHalf: *out = core::DType::kFloat16; return true;
    case at::kBFloat16: *out = core::DType::kBFloat16; return true;
    case at::kChar: *out = core::DType::kInt8; return true;
    case at::kByte: *out = core::DType::kUInt8; return true;
    case at::kInt: *out = core::DType::kInt32; return true;
    case at::kLong: *out = core::DType::kInt64; return true;
    default: return false;
  }
}

// The core's dtype of a tensor whose dtype was checked already (tensor_checks.h).
inline core::DType dtype_of(const at::Tensor& t) {
  core::DType d = core::DType::kFloat32;
  TORCH_CHECK(to_core_dtype(t.scalar_type(), &d), "pycomm: unchecked dtype ", t.scalar_type());
  return d;
}

inline constexpr const char* kSupportedDtypes =
    "float32, float64, float16, bfloat16, int8, uint8, int32, int64";

// A name of core::kReduceOps (pycomm.all_reduce's op="sum", ...).
inline bool to_core_op(const std::string& s, core::ReduceOp* out) {
  for (core::ReduceOp op : core::kReduceOps) {
    if (s == core::op_name(op)) {
      *out = op;
      return true;
    }
  }
  return false;
}

// c10d's ReduceOp. PREMUL_SUM becomes a sum of inputs scaled first (*premul
// set); the bitwise ops are not pycomm's (false: the backend forwards them).
inline bool to_core_op(const c10d::ReduceOp& op, core::ReduceOp* out, bool* premul) {
  *premul = false;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: *out = core::ReduceOp::kSum; return true;
    case c10d::ReduceOp::AVG: *out = core::ReduceOp::kAvg; return true;
    case c10d::ReduceOp::PRODUCT: *out = core::ReduceOp::kProduct; return true;
    case c10d::ReduceOp::MIN: *out = core::ReduceOp::kMin; return true;
    case c10d::ReduceOp::MAX: *out = core::ReduceOp::kMax; return true;
    case c10d::ReduceOp::PREMUL_SUM:
      *out = core::ReduceOp::kSum;
      *premul = true;
      return true;
    default: return false;
  }
}

// A name of core::kAllReduceAlgorithms (algorithm="ring", ...).
inline bool to_core_algorithm(const std::string& s, core::Algorithm* out) {
  for (core::Algorithm a : core::kAllReduceAlgorithms) {
    if (s == core::algorithm_name(uint32_t(a))) {
      *out = a;
      return true;
    }
  }
  return false;
}

// "a, b, c": the names an error lists.
template <typename Range, typename NameOf>
std::string joined_names(const Range& items, NameOf name_of) {
  std::string out;
  for (const auto& x : items) out += (out.empty() ? "" : ", ") + std::string(name_of(x));
  return out;
}

}  // namespace pycomm
