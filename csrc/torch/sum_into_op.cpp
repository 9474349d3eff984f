// pycomm::sum_into_(dst, src): dst += src element-wise, float32. The smallest
// op that exercises the CUDA reduction kernel (cuda_reduce.cpp); its CPU kernel
// is the core's reduction loop, so both devices are tested against each other.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../core/kernels/reduce_kernels.h"
#include "sum_into_op.h"

namespace pycomm {

void check_sum_into_args(const at::Tensor& dst, const at::Tensor& src, c10::DeviceType device_type) {
  TORCH_CHECK_VALUE(dst.device().type() == device_type && src.device().type() == device_type,
                    "sum_into: dst and src must be ", device_type, " tensors, got ", dst.device(),
                    " and ", src.device());
  TORCH_CHECK_VALUE(dst.device() == src.device(), "sum_into: dst and src on different devices");
  TORCH_CHECK_TYPE(dst.scalar_type() == at::kFloat && src.scalar_type() == at::kFloat,
                   "sum_into: only float32 is implemented, got ", dst.scalar_type());
  TORCH_CHECK_VALUE(dst.is_contiguous() && src.is_contiguous(),
                    "sum_into: tensors must be contiguous");
  TORCH_CHECK_VALUE(dst.numel() == src.numel(), "sum_into: sizes differ: ", dst.numel(), " vs ",
                    src.numel());
}

namespace {

at::Tensor& sum_into_cpu(at::Tensor& dst, const at::Tensor& src) {
  check_sum_into_args(dst, src, c10::DeviceType::CPU);
  // ring_middle's pointers are restrict-qualified, so it writes a fresh buffer.
  at::Tensor out = at::empty_like(dst);
  core::ring_middle(core::DType::kFloat32, core::ReduceOp::kSum, dst.data_ptr(), src.data_ptr(),
                    out.data_ptr(), size_t(dst.numel()));
  dst.copy_(out);
  return dst;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pycomm, m) { m.def("sum_into_(Tensor(a!) dst, Tensor src) -> Tensor(a!)"); }
TORCH_LIBRARY_IMPL(pycomm, CPU, m) { m.impl("sum_into_", &sum_into_cpu); }

}  // namespace pycomm
