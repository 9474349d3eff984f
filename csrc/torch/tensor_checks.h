// Argument checks shared by pycomm's own API and the c10d backend. Each names
// the argument and is raised before anything is sent: TypeError (c10::TypeError)
// for a wrong type, layout, device or dtype, ValueError (c10::ValueError) for a
// wrong shape or memory layout.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "../core/dtypes.h"

namespace pycomm {

// A dense, contiguous CPU tensor (or CUDA, where `cuda_ok`) of a dtype the
// core reduces; returns that dtype.
core::DType check_tensor(const at::Tensor& t, const char* arg, bool cuda_ok = false);

// Exactly one tensor (c10d passes lists with one tensor per device).
const at::Tensor& single_tensor(const std::vector<at::Tensor>& ts, const char* arg);

// `t` has `dtype` and `numel` elements.
void check_like(const at::Tensor& t, const char* arg, core::DType dtype, int64_t numel,
                const char* reference);

// all_to_all's lists: `world` tensors each, all of one dtype; returns it.
core::DType check_all_to_all_lists(const std::vector<at::Tensor>& outputs,
                                   const std::vector<at::Tensor>& inputs, int world);

// An op the dtype supports: avg and premul_sum need a floating dtype.
void check_op_for_dtype(core::ReduceOp op, bool premul, core::DType dtype);

}  // namespace pycomm
