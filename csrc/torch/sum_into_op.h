// pycomm::sum_into_: the argument checks its CPU and CUDA kernels share.
#pragma once

#include <ATen/ATen.h>

namespace pycomm {

// dst and src: float32, contiguous, the same size, both on `device_type`.
void check_sum_into_args(const at::Tensor& dst, const at::Tensor& src, c10::DeviceType device_type);

}  // namespace pycomm
