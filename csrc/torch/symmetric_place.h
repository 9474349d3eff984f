// Where a tensor in the group's symmetric memory lies in every rank's copy:
// what the host plan's all-reduce needs to reduce it in place. Apart from
// symmetric_memory.h (which finds it: symmetric_place()) so that the plans'
// interface carries it without torch's symmetric-memory headers.
#pragma once

#include <c10/util/SmallVector.h>

#include <cstdint>

namespace pycomm {

// Every rank's copy of the tensor and its place, as core::AllReduceArgs takes
// them (peers empty: the tensor is not in symmetric memory).
struct SymmetricPlace {
  c10::SmallVector<char*, 8> peers;
  uint64_t place = 0;
};

}  // namespace pycomm
