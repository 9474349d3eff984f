// pycomm::sum_into_(dst, src): dst += src element-wise, float32. The smallest
// op that exercises the CUDA reduction kernel (cuda_reduce.cpp); its CPU kernel
// is the core's reduction loop, so both devices are tested against each other.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../core/reduce_kernels.h"

namespace pycomm {
namespace {

at::Tensor& sum_into_cpu(at::Tensor& dst, const at::Tensor& src) {
  TORCH_CHECK_VALUE(dst.device().is_cpu() && src.device().is_cpu(),
                    "sum_into: tensors must be on the CPU");
  TORCH_CHECK_TYPE(dst.scalar_type() == at::kFloat && src.scalar_type() == at::kFloat,
                   "sum_into: only float32 is implemented, got ", dst.scalar_type());
  TORCH_CHECK_VALUE(dst.is_contiguous() && src.is_contiguous(),
                    "sum_into: tensors must be contiguous");
  TORCH_CHECK_VALUE(dst.numel() == src.numel(), "sum_into: sizes differ: ", dst.numel(), " vs ",
                    src.numel());
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
