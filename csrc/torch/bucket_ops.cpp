// The gradient-bucketing ops: pycomm::flatten, flatten_into and unflatten.
// Schemas, argument checks, the CPU and Meta kernels, and flatten itself: an
// allocation plus flatten_into, registered as CompositeImplicitAutograd so it
// works on every device flatten_into does and decomposes under FakeTensor and
// torch.compile (which could not infer a device for an empty list otherwise).
// The CUDA kernels are in bucket_ops_cuda.cpp.
#include "bucket_ops.h"
#include "dtype_map.h"

#include <ATen/ATen.h>
#include <c10/core/DefaultDtype.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pycomm::bucket {

bool to_bucket_dtype(at::ScalarType t, core::DType* out) {
  // The one torch -> core dtype map (dtype_map.h), limited to floating types.
  const core::DType d = core_dtype(t);
  if (!core::is_floating(d) || at::isComplexType(t)) return false;
  *out = d;
  return true;
}

c10::SymInt check_tensor_list(const char* op, const char* name, at::TensorList ts,
                              const at::Device& device) {
  c10::SymInt total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const at::Tensor& t = ts[i];
    TORCH_CHECK_TYPE(t.defined(), op, ": ", name, "[", i, "] is an undefined tensor");
    TORCH_CHECK_TYPE(t.layout() == at::kStrided, op, ": ", name, "[", i,
                     "] must be a dense (strided) tensor, got layout ", t.layout());
    core::DType d;
    TORCH_CHECK_TYPE(to_bucket_dtype(t.scalar_type(), &d), op, ": ", name, "[", i,
                     "] has unsupported dtype ", t.scalar_type(), "; supported: ", kBucketDtypes);
    TORCH_CHECK_TYPE(t.scalar_type() == ts[0].scalar_type(), op, ": ", name, "[", i,
                     "] has dtype ", t.scalar_type(), " but ", name, "[0] has ",
                     ts[0].scalar_type(), "; the tensors of one bucket share one dtype");
    TORCH_CHECK_VALUE(t.device() == device, op, ": ", name, "[", i, "] is on ", t.device(),
                      " but the bucket is on ", device);
    TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", name, "[", i,
                      "] must be contiguous, got sizes ", t.sym_sizes(), " and strides ",
                      t.sym_strides());
    total += t.sym_numel();
  }
  return total;
}

void check_bucket(const char* op, const char* name, const at::Tensor& bucket,
                  const c10::SymInt& needed) {
  TORCH_CHECK_TYPE(bucket.defined(), op, ": ", name, " is an undefined tensor");
  TORCH_CHECK_TYPE(bucket.layout() == at::kStrided, op, ": ", name,
                   " must be a dense (strided) tensor, got layout ", bucket.layout());
  core::DType d;
  TORCH_CHECK_TYPE(to_bucket_dtype(bucket.scalar_type(), &d), op, ": ", name,
                   " has unsupported dtype ", bucket.scalar_type(), "; supported: ",
                   kBucketDtypes);
  TORCH_CHECK_VALUE(bucket.dim() == 1, op, ": ", name, " must be 1-D, got sizes ",
                    bucket.sym_sizes());
  TORCH_CHECK_VALUE(bucket.is_contiguous(), op, ": ", name, " must be contiguous, got stride ",
                    bucket.sym_strides());
  TORCH_CHECK_VALUE(bucket.sym_numel() >= needed, op, ": ", name, " has ", bucket.sym_numel(),
                    " elements but the tensors hold ", needed);
}

namespace {

struct ByteRange {
  uintptr_t begin;
  uintptr_t end;
  size_t index;
};

ByteRange range_of(const at::Tensor& t, size_t index) {
  const auto b = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  return {b, b + t.nbytes(), index};
}

bool overlaps(const ByteRange& a, const ByteRange& b) { return a.begin < b.end && b.begin < a.end; }

}  // namespace

void check_flatten_overlap(const char* op, at::TensorList tensors, const at::Tensor& out,
                           int64_t total) {
  if (total == 0) return;
  const auto ob = reinterpret_cast<uintptr_t>(out.const_data_ptr());
  const ByteRange written{ob, ob + uintptr_t(total) * out.element_size(), 0};
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel() == 0) continue;
    TORCH_CHECK_VALUE(!overlaps(range_of(tensors[i], i), written), op, ": tensors[", i,
                      "] shares memory with out; the bucket must be a separate buffer");
  }
}

void check_unflatten_overlap(const char* op, const at::Tensor& flat, at::TensorList outs,
                             int64_t total) {
  if (total == 0) return;
  const auto fb = reinterpret_cast<uintptr_t>(flat.const_data_ptr());
  const ByteRange read{fb, fb + uintptr_t(total) * flat.element_size(), 0};
  std::vector<ByteRange> written;
  written.reserve(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].numel() == 0) continue;
    written.push_back(range_of(outs[i], i));
    TORCH_CHECK_VALUE(!overlaps(written.back(), read), op, ": tensors[", i,
                      "] shares memory with flat; unflatten cannot work in place");
  }
  // Two outputs sharing bytes would make the result depend on write order.
  std::sort(written.begin(), written.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < written.size(); ++k) {
    const ByteRange& a = written[k - 1];
    const ByteRange& b = written[k];
    TORCH_CHECK_VALUE(!overlaps(a, b), op, ": tensors[", std::min(a.index, b.index),
                      "] and tensors[", std::max(a.index, b.index), "] share memory");
  }
}

std::vector<core::BucketSlice> pack_slices(at::TensorList tensors, const at::Tensor& out) {
  std::vector<core::BucketSlice> slices;
  slices.reserve(tensors.size());
  char* base = static_cast<char*>(out.data_ptr());
  const size_t esize = out.element_size();
  size_t offset = 0;
  for (const at::Tensor& t : tensors) {
    const size_t n = size_t(t.numel());
    if (n != 0) slices.push_back({t.const_data_ptr(), base + offset * esize, n});
    offset += n;
  }
  return slices;
}

std::vector<core::BucketSlice> unpack_slices(const at::Tensor& flat, at::TensorList outs) {
  std::vector<core::BucketSlice> slices;
  slices.reserve(outs.size());
  const char* base = static_cast<const char*>(flat.const_data_ptr());
  const size_t esize = flat.element_size();
  size_t offset = 0;
  for (const at::Tensor& t : outs) {
    const size_t n = size_t(t.numel());
    if (n != 0) slices.push_back({base + offset * esize, t.data_ptr(), n});
    offset += n;
  }
  return slices;
}

namespace {

// ---- checks alone: the Meta kernels, also run under FakeTensor and torch.compile.

void flatten_into_meta(at::TensorList tensors, const at::Tensor& out, double /*scale*/) {
  check_bucket("flatten_into", "out", out,
               check_tensor_list("flatten_into", "tensors", tensors, out.device()));
}

void unflatten_meta(const at::Tensor& flat, at::TensorList outs, double /*scale*/) {
  check_bucket("unflatten", "flat", flat,
               check_tensor_list("unflatten", "tensors", outs, flat.device()));
}

// ---- CPU: the core's loops, on the calling thread.

void flatten_into_cpu(at::TensorList tensors, const at::Tensor& out, double scale) {
  const int64_t total =
      check_tensor_list("flatten_into", "tensors", tensors, out.device()).expect_int();
  check_bucket("flatten_into", "out", out, total);
  check_flatten_overlap("flatten_into", tensors, out, total);
  core::DType out_dtype;
  to_bucket_dtype(out.scalar_type(), &out_dtype);
  const auto slices = pack_slices(tensors, out);
  core::copy_slices(list_dtype(tensors, out_dtype), out_dtype, slices.data(), slices.size(),
                    scale);
}

void unflatten_cpu(const at::Tensor& flat, at::TensorList outs, double scale) {
  const int64_t total = check_tensor_list("unflatten", "tensors", outs, flat.device()).expect_int();
  check_bucket("unflatten", "flat", flat, total);
  check_unflatten_overlap("unflatten", flat, outs, total);
  core::DType flat_dtype;
  to_bucket_dtype(flat.scalar_type(), &flat_dtype);
  const auto slices = unpack_slices(flat, outs);
  core::copy_slices(flat_dtype, list_dtype(outs, flat_dtype), slices.data(), slices.size(), scale);
}

// ---- flatten: allocate the bucket, then flatten_into on whatever device.

at::Tensor flatten(at::TensorList tensors, std::optional<at::ScalarType> dtype, double scale) {
  // An empty list has no device to dispatch on; it lands here all the same
  // (a composite kernel also serves dispatch key Undefined) and gives an empty
  // CPU bucket.
  const at::Device device = tensors.empty() ? at::Device(at::kCPU) : tensors[0].device();
  // Checked here too, so that errors name the op the caller called.
  const c10::SymInt total = check_tensor_list("flatten", "tensors", tensors, device);
  const at::ScalarType st = dtype.has_value() ? *dtype
                            : tensors.empty() ? c10::get_default_dtype_as_scalartype()
                                              : tensors[0].scalar_type();
  core::DType unused;
  TORCH_CHECK_TYPE(to_bucket_dtype(st, &unused), "flatten: dtype ", st,
                   " is not supported; supported: ", kBucketDtypes);
  at::Tensor out = at::empty_symint({total}, at::TensorOptions().dtype(st).device(device));
  static auto flatten_into_op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("pycomm::flatten_into", "")
          .typed<void(at::TensorList, const at::Tensor&, double)>();
  flatten_into_op.call(tensors, out, scale);
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pycomm, m) {
  // Packs `tensors` into a new 1-D bucket of `dtype` (default: the tensors' dtype),
  // bucket[offset_i + j] = tensors[i][j] * scale, offsets in list order.
  m.def("flatten(Tensor[] tensors, ScalarType? dtype=None, float scale=1.0) -> Tensor");
  // The same into out[0 : sum of numels]; the rest of out is left as it is.
  m.def("flatten_into(Tensor[] tensors, Tensor(a!) out, float scale=1.0) -> ()");
  // tensors[i][j] = flat[offset_i + j] * scale, cast to the tensors' dtype.
  m.def("unflatten(Tensor flat, Tensor(a!)[] tensors, float scale=1.0) -> ()");
}

TORCH_LIBRARY_IMPL(pycomm, CompositeImplicitAutograd, m) { m.impl("flatten", &flatten); }

TORCH_LIBRARY_IMPL(pycomm, CPU, m) {
  m.impl("flatten_into", &flatten_into_cpu);
  m.impl("unflatten", &unflatten_cpu);
}

TORCH_LIBRARY_IMPL(pycomm, Meta, m) {
  m.impl("flatten_into", &flatten_into_meta);
  m.impl("unflatten", &unflatten_meta);
}

}  // namespace pycomm::bucket
