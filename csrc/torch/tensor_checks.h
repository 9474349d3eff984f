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

// The shapes of the collectives whose flat and hierarchical forms share them
// (frontend.cpp, for every plan). Each returns the dtype of every pair/list.
// all_gather into tensors: output i holds world x input i.
std::vector<core::DType> check_all_gather_pairs(const std::vector<at::Tensor>& outputs,
                                                const std::vector<at::Tensor>& inputs, int world);
// all_gather into lists: list i holds world tensors shaped like input i.
std::vector<core::DType> check_all_gather_lists(
    const std::vector<std::vector<at::Tensor>>& outputs, const std::vector<at::Tensor>& inputs,
    int world);
// reduce_scatter from tensors: input i holds world x output i.
std::vector<core::DType> check_reduce_scatter_pairs(const std::vector<at::Tensor>& outputs,
                                                    const std::vector<at::Tensor>& inputs, int world,
                                                    core::ReduceOp op, bool premul);
// reduce_scatter from a list: one output, one list of world tensors shaped like it.
core::DType check_reduce_scatter_list(const std::vector<at::Tensor>& outputs,
                                      const std::vector<std::vector<at::Tensor>>& inputs,
                                      int world, core::ReduceOp op, bool premul);
// all_to_all_single: input and output of one dtype.
core::DType check_all_to_all_single(const at::Tensor& output, const at::Tensor& input);

// all_to_all's lists: `world` tensors each, all of one dtype; returns it.
core::DType check_all_to_all_lists(const std::vector<at::Tensor>& outputs,
                                   const std::vector<at::Tensor>& inputs, int world);

// An op the dtype supports: avg and premul_sum need a floating dtype.
void check_op_for_dtype(core::ReduceOp op, bool premul, core::DType dtype);

}  // namespace pycomm
