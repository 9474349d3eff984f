// Glue for the CUDA reduction kernel: checks tensors, launches on torch's
// current stream. Built only when the CUDA sources are (PYCOMM_WITH_CUDA).
#ifdef PYCOMM_WITH_CUDA
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../cuda/reduce_launch.h"
#include "sum_into_op.h"

namespace pycomm {
namespace {

at::Tensor& sum_into_cuda(at::Tensor& dst, const at::Tensor& src) {
  check_sum_into_args(dst, src, c10::DeviceType::CUDA);
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
