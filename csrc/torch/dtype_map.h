// The one place where torch's dtypes and reduction names meet the core's.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include "../core/collective.h"
#include "../core/dtypes.h"

namespace pycomm {

// The core's element type of a torch dtype; every dtype has one, so no call
// is refused for its dtype alone (the one place dtypes are dispatched):
// - the core's arithmetic types by name (bool too: gloo's byte arithmetic);
// - complex dtypes as their real component: the front-end hands the plans
//   complex tensors viewed as pairs of reals (real_view below), as
//   torch.distributed itself does for all_reduce, broadcast and all_gather;
// - every other dtype (float8, float4, bits, sub-byte integers, quantized,
//   what torch adds later) opaque: moved by its bytes, never reduced, and
//   tagged with its ScalarType so that ranks of different dtypes mismatch.
inline core::DType core_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return core::DType::kFloat32;
    case at::kDouble: return core::DType::kFloat64;
    case at::kHalf: return core::DType::kFloat16;
    case at::kBFloat16: return core::DType::kBFloat16;
    case at::kChar: return core::DType::kInt8;
    case at::kByte: return core::DType::kUInt8;
    case at::kShort: return core::DType::kInt16;
    case at::kInt: return core::DType::kInt32;
    case at::kLong: return core::DType::kInt64;
    case at::kBool: return core::DType::kBool;
    case at::kUInt16: return core::DType::kUInt16;
    case at::kUInt32: return core::DType::kUInt32;
    case at::kUInt64: return core::DType::kUInt64;
    default: break;
  }
  if (at::isComplexType(t)) return core_dtype(c10::toRealValueType(t));
  return core::opaque_dtype(uint32_t(t), c10::elementSize(t));
}

// The core's dtype of a tensor a plan is given (real_view: never complex).
inline core::DType dtype_of(const at::Tensor& t) { return core_dtype(t.scalar_type()); }

// A contiguous tensor as the plans take it: 1-D, and complex viewed as pairs
// of reals. A 1-D real tensor (DDP's buckets) is its own: a view is an op
// through torch's dispatcher, microseconds on a small message's path.
inline at::Tensor real_view(const at::Tensor& t) {
  // An empty tensor may keep any strides, which view_as_real and view(dtype) refuse.
  if (t.numel() == 0 && (t.dim() != 1 || t.is_complex())) {
    return at::empty({0}, t.options().dtype(c10::toRealValueType(t.scalar_type())));
  }
  if (t.is_complex()) return at::view_as_real(t).reshape({-1});
  return t.dim() == 1 ? t : t.reshape({-1});
}

// torch's name of a dtype, as Python prints it ("float8_e4m3fn", "complex64").
inline std::string torch_dtype_name(at::ScalarType t) {
  return "torch." + std::string(c10::getDtypeNames(t).first);
}

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
// set); false for an op pycomm does not know (the backend forwards it).
inline bool to_core_op(const c10d::ReduceOp& op, core::ReduceOp* out, bool* premul) {
  *premul = false;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: *out = core::ReduceOp::kSum; return true;
    case c10d::ReduceOp::AVG: *out = core::ReduceOp::kAvg; return true;
    case c10d::ReduceOp::PRODUCT: *out = core::ReduceOp::kProduct; return true;
    case c10d::ReduceOp::MIN: *out = core::ReduceOp::kMin; return true;
    case c10d::ReduceOp::MAX: *out = core::ReduceOp::kMax; return true;
    case c10d::ReduceOp::BAND: *out = core::ReduceOp::kBand; return true;
    case c10d::ReduceOp::BOR: *out = core::ReduceOp::kBor; return true;
    case c10d::ReduceOp::BXOR: *out = core::ReduceOp::kBxor; return true;
    case c10d::ReduceOp::PREMUL_SUM:
      *out = core::ReduceOp::kSum;
      *premul = true;
      return true;
    default: return false;
  }
}

// The c10d ReduceOp of a core op (pycomm.all_reduce's and the op's names).
inline c10d::ReduceOp c10d_op_of(core::ReduceOp op) {
  switch (op) {
    case core::ReduceOp::kAvg: return c10d::ReduceOp(c10d::ReduceOp::AVG);
    case core::ReduceOp::kMax: return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case core::ReduceOp::kMin: return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case core::ReduceOp::kProduct: return c10d::ReduceOp(c10d::ReduceOp::PRODUCT);
    case core::ReduceOp::kBand: return c10d::ReduceOp(c10d::ReduceOp::BAND);
    case core::ReduceOp::kBor: return c10d::ReduceOp(c10d::ReduceOp::BOR);
    case core::ReduceOp::kBxor: return c10d::ReduceOp(c10d::ReduceOp::BXOR);
    default: return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
}

// A name of core::kAllReduceAlgorithms (algorithm="ring", ...).
inline bool to_core_algorithm(const std::string& s, core::Algorithm* out) {
  for (core::Algorithm a : core::kAllReduceAlgorithms) {
    if (s == core::algorithm_name(a)) {
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
