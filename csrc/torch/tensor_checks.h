// Argument checks shared by pycomm's own API and the c10d backend. Each names
// the argument and is raised before anything is sent: TypeError (c10::TypeError)
// for a wrong type, layout, device or dtype, ValueError (c10::ValueError) for a
// wrong shape, an op a dtype cannot take, or an output that cannot be written.
//
// Every dtype and every strided layout passes: the front-end moves any dtype
// by its bytes, reduces those it has arithmetic for, and stages tensors that
// are not contiguous (staged_tensor.h). What is refused is what gloo refuses
// too: an op a dtype has no arithmetic for (check_op_for_dtype).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "../core/dtypes.h"

namespace pycomm {

// A defined, strided CPU tensor (or CUDA, where `cuda_ok`) of any dtype.
void check_tensor(const at::Tensor& t, const char* arg, bool cuda_ok = false);

// A tensor the collective writes: no two of its elements share memory (an
// expanded view has a stride of 0, and no single value could be right for
// both of its aliases).
void check_writable(const at::Tensor& t, const char* arg);

// Exactly one tensor (c10d passes lists with one tensor per device).
const at::Tensor& single_tensor(const std::vector<at::Tensor>& ts, const char* arg);

// `t` passes check_tensor, has `dtype` and `numel` elements.
void check_like(const at::Tensor& t, const char* arg, at::ScalarType dtype, int64_t numel,
                const char* reference);

// The shapes of the collectives whose flat and hierarchical forms share them
// (frontend_collectives.cpp, for every plan); outputs are checked writable.
// all_gather into tensors: output i holds world x input i.
void check_all_gather_pairs(const std::vector<at::Tensor>& outputs,
                            const std::vector<at::Tensor>& inputs, int world);
// all_gather into lists: list i holds world tensors shaped like input i.
void check_all_gather_lists(const std::vector<std::vector<at::Tensor>>& outputs,
                            const std::vector<at::Tensor>& inputs, int world);
// reduce_scatter from tensors: input i holds world x output i.
void check_reduce_scatter_pairs(const std::vector<at::Tensor>& outputs,
                                const std::vector<at::Tensor>& inputs, int world,
                                core::ReduceOp op, bool premul);
// reduce_scatter from a list: one output, one list of world tensors shaped like it.
void check_reduce_scatter_list(const std::vector<at::Tensor>& outputs,
                               const std::vector<std::vector<at::Tensor>>& inputs, int world,
                               core::ReduceOp op, bool premul);
// all_to_all_single: input and output of one dtype.
void check_all_to_all_single(const at::Tensor& output, const at::Tensor& input);
// all_to_all's lists: `world` tensors each, all of one dtype.
void check_all_to_all_lists(const std::vector<at::Tensor>& outputs,
                            const std::vector<at::Tensor>& inputs, int world);

// An op the dtype takes, as gloo decides it where gloo defines it: avg and
// premul_sum need a floating or complex dtype; max, min and product a real
// one; the bitwise ops an integer or bool one; and dtypes with no arithmetic
// (float8, bits, ...) take none (TypeError). `arg` names the tensor, whose
// dtype is `dtype`, the core's `d` (where the caller has mapped it already).
void check_op_for_dtype(core::ReduceOp op, bool premul, core::DType d, at::ScalarType dtype, const char* arg);
void check_op_for_dtype(core::ReduceOp op, bool premul, at::ScalarType dtype, const char* arg);

}  // namespace pycomm
