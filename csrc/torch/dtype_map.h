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

inline constexpr const char* kSupportedDtypes =
    "float32, float64, float16, bfloat16, int8, uint8, int32, int64";

inline bool to_core_op(const std::string& s, core::ReduceOp* out) {
  if (s == "sum") *out = core::ReduceOp::kSum;
  else if (s == "avg") *out = core::ReduceOp::kAvg;
  else if (s == "max") *out = core::ReduceOp::kMax;
  else if (s == "min") *out = core::ReduceOp::kMin;
  else if (s == "product") *out = core::ReduceOp::kProduct;
  else return false;
  return true;
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

inline bool to_core_algorithm(const std::string& s, core::Algorithm* out) {
  if (s == "auto") *out = core::Algorithm::kAuto;
  else if (s == "ring") *out = core::Algorithm::kRing;
  else if (s == "direct") *out = core::Algorithm::kDirect;
  else if (s == "two_shot") *out = core::Algorithm::kTwoShot;  // CUDA tensors only
  else return false;
  return true;
}

}  // namespace pycomm
