// Element types and reduction operators understood by the core. The glue maps
// torch's ScalarType and ReduceOp onto these in one place (csrc/torch/dtype_map.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pycomm::core {

enum class DType : uint32_t {
  kFloat32 = 1,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
};

enum class ReduceOp : uint32_t { kSum = 1, kAvg, kMax, kMin, kProduct };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kInt8:
    case DType::kUInt8: return 1;
  }
  return 0;
}

// Size of the type partial sums travel in: half types accumulate in float32.
inline size_t accum_size(DType t) {
  return (t == DType::kFloat16 || t == DType::kBFloat16) ? 4 : dtype_size(t);
}

inline bool is_floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

inline const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProduct: return "product";
  }
  return "unknown";
}

// The reductions pycomm.all_reduce takes by name, in the order errors list them.
inline constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                          ReduceOp::kMin, ReduceOp::kProduct};

}  // namespace pycomm::core
