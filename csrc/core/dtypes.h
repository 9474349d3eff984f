// Element types and reduction operators understood by the core. The glue maps
// torch's ScalarType and ReduceOp onto these in one place (csrc/torch/dtype_map.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pycomm::core {

// The element types the core has arithmetic for. Every other element type
// (float8, bits, sub-byte integers, what torch adds later) is *opaque*: the
// core moves its bytes and compares its identity at the handshake, and never
// reduces it (opaque_dtype below). Complex tensors reach the core as pairs of
// their real component type (the glue views them as real).
enum class DType : uint32_t {
  kFloat32 = 1,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  // One byte, 0 or 1, as torch writes it. Sum is or and product is and (as
  // torch's + and * of bools, and NCCL's sum, which it runs as max): the
  // result is a bool again, whatever the number of ranks. (gloo adds the bytes
  // in all_reduce and reduce: two Trues make a byte of 2, 256 make 0.)
  kBool,
  kInt16,
  kUInt16,
  kUInt32,
  kUInt64,
};

// An opaque element type: bit 31 set, a tag naming the type (the glue's
// choice: torch's ScalarType), and the element size in bytes (1-255). Two
// ranks whose tags differ are in different collectives.
inline constexpr uint32_t kOpaqueBit = 0x80000000u;
inline constexpr DType opaque_dtype(uint32_t tag, size_t size) {
  return DType(kOpaqueBit | ((tag & 0x7fffffu) << 8) | uint32_t(size & 0xffu));
}
inline constexpr bool is_opaque(DType t) { return (uint32_t(t) & kOpaqueBit) != 0; }
inline constexpr uint32_t opaque_tag(DType t) { return (uint32_t(t) >> 8) & 0x7fffffu; }

// Reductions: the arithmetic ones every reducible dtype takes (avg and
// premul_sum floating types only), and the bitwise ones of integers and bool.
enum class ReduceOp : uint32_t { kSum = 1, kAvg, kMax, kMin, kProduct, kBand, kBor, kBxor };

inline size_t dtype_size(DType t) {
  if (is_opaque(t)) return uint32_t(t) & 0xffu;
  switch (t) {
    case DType::kFloat64:
    case DType::kInt64:
    case DType::kUInt64: return 8;
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUInt32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
    case DType::kUInt16: return 2;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool: return 1;
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

// A type the core reduces (with some op: is_floating or integral or bool).
inline bool is_reducible(DType t) { return !is_opaque(t) && dtype_size(t) != 0; }

inline bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
}

// The op the kernels run for `op` on `dtype`: on bool, sum is max (or) and
// product is min (and) of the 0/1 bytes; any other pair is itself.
inline ReduceOp kernel_op(DType dtype, ReduceOp op) {
  if (dtype != DType::kBool) return op;
  return op == ReduceOp::kSum ? ReduceOp::kMax : op == ReduceOp::kProduct ? ReduceOp::kMin : op;
}

// "opaque" for every opaque type: dtype_label names it fully.
inline const char* dtype_name(DType t) {
  if (is_opaque(t)) return "opaque";
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
    case DType::kInt16: return "int16";
    case DType::kUInt16: return "uint16";
    case DType::kUInt32: return "uint32";
    case DType::kUInt64: return "uint64";
  }
  return "unknown";
}

// dtype_name, or for an opaque type its tag and size ("opaque#23/1B").
inline std::string dtype_label(DType t) {
  if (!is_opaque(t)) return dtype_name(t);
  return "opaque#" + std::to_string(opaque_tag(t)) + "/" + std::to_string(dtype_size(t)) + "B";
}

inline const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProduct: return "product";
    case ReduceOp::kBand: return "band";
    case ReduceOp::kBor: return "bor";
    case ReduceOp::kBxor: return "bxor";
  }
  return "unknown";
}

// The reductions pycomm.all_reduce takes by name, in the order errors list them.
inline constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                          ReduceOp::kMin, ReduceOp::kProduct};

// The element types the core reduces, in the order errors list them.
inline constexpr DType kReducibleDtypes[] = {
    DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
    DType::kUInt8,   DType::kInt16,   DType::kUInt16,  DType::kInt32,    DType::kUInt32,
    DType::kInt64,   DType::kUInt64,  DType::kBool};

}  // namespace pycomm::core
