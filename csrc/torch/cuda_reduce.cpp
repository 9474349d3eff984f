// Glue for the CUDA reduction kernel: checks tensors, launches on torch's
// current stream. Built only when the CUDA sources are (PYCOMM_WITH_CUDA).
#ifdef PYCOMM_WITH_CUDA
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../cuda/reduce_launch.h"

namespace pycomm {
namespace {

at::Tensor& sum_into_cuda(at::Tensor& dst, const at::Tensor& src) {
  // Same checks as the CPU kernel; kept beside the launch they guard.
  TORCH_CHECK_VALUE(dst.is_cuda() && src.is_cuda(), "sum_into: tensors must be CUDA tensors");
  TORCH_CHECK_VALUE(dst.device() == src.device(), "sum_into: dst and src on different devices");
  TORCH_CHECK_TYPE(dst.scalar_type() == at::kFloat && src.scalar_type() == at::kFloat,
                   "sum_into: only float32 is implemented, got ", dst.scalar_type());
  TORCH_CHECK_VALUE(dst.is_contiguous() && src.is_contiguous(),
                    "sum_into: tensors must be contiguous");
  TORCH_CHECK_VALUE(dst.numel() == src.numel(), "sum_into: sizes differ: ", dst.numel(), " vs ",
                    src.numel());
  c10::cuda::CUDAGuard guard(dst.device());
  C10_CUDA_CHECK(pycomm_cuda_sum_into_f32(dst.data_ptr<float>(), src.data_ptr<float>(),
                                          size_t(dst.numel()),
                                          c10::cuda::getCurrentCUDAStream().stream()));
  return dst;
}

}  // namespace

// The schema and the CPU kernel are in sum_into_op.cpp.
TORCH_LIBRARY_IMPL(pycomm, CUDA, m) { m.impl("sum_into_", &sum_into_cuda); }

}  // namespace pycomm
#endif
