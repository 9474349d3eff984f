// Argument checks and slice tables shared by the CPU, CUDA and Meta kernels of
// pycomm::flatten_into and pycomm::unflatten (bucket_ops.cpp, bucket_ops_cuda.cpp).
// Every kernel runs all of its checks before it writes a byte, so a call that
// fails leaves its outputs untouched.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "../core/kernels/bucket_pack.h"
#include "../core/dtypes.h"

namespace pycomm::bucket {

inline constexpr const char* kBucketDtypes = "float32, float64, float16, bfloat16";

// Returns false for a dtype a bucket cannot hold.
bool to_bucket_dtype(at::ScalarType t, core::DType* out);

// Checks the list that flatten_into reads or unflatten writes (`name` in
// errors): every tensor strided, contiguous, on `device`, and all of one
// supported dtype. Returns the sum of their numels (symbolic while tracing).
c10::SymInt check_tensor_list(const char* op, const char* name, at::TensorList ts,
                              const at::Device& device);

// Checks the bucket ("out" or "flat"): strided, 1-D, contiguous, a supported
// dtype, and at least `needed` elements long.
void check_bucket(const char* op, const char* name, const at::Tensor& bucket,
                  const c10::SymInt& needed);

// The kernels read and write through restrict-qualified pointers: on real
// tensors, check that no destination byte is also a source byte or another
// destination's byte. `total` is the element count checked above.
void check_flatten_overlap(const char* op, at::TensorList tensors, const at::Tensor& out,
                           int64_t total);
void check_unflatten_overlap(const char* op, const at::Tensor& flat, at::TensorList outs,
                             int64_t total);

// Slices for the converters: tensors[i] -> out[offset_i : offset_i + numel_i]
// (pack), or back (unpack), where offset_i is the sum of the numels before i.
// Empty tensors get no slice.
std::vector<core::BucketSlice> pack_slices(at::TensorList tensors, const at::Tensor& out);
std::vector<core::BucketSlice> unpack_slices(const at::Tensor& flat, at::TensorList outs);

// The dtype of a checked, non-empty list, or of `fallback` when it is empty.
inline core::DType list_dtype(at::TensorList ts, core::DType fallback) {
  core::DType d = fallback;
  if (!ts.empty()) to_bucket_dtype(ts[0].scalar_type(), &d);
  return d;
}

}  // namespace pycomm::bucket
