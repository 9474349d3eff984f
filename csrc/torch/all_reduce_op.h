// The all-reduce of torch.ops.pycomm.all_reduce_ (all_reduce_op.cpp), for the
// other ops that end in one (symmetric_memory_ops.cpp).
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "../core/dtypes.h"

namespace pycomm {

// In place and blocking, on the group named `group_name`: pycomm's front-end
// (a tensor in the group's symmetric memory is reduced where it lies), or that
// group's own all_reduce. ValueError naming `caller`'s group_name when no
// group has that name.
void all_reduce_on_group(at::Tensor& tensor, core::ReduceOp op, const std::string& group_name,
                         const char* caller);

}  // namespace pycomm
