// The CUDA runtime keeps one "last error" per thread, which torch reads at its
// next check and reports as its own. pycomm reports the errors it gets in its
// own words, so it clears the last error, but only when it is the very error
// pycomm just got: an older one belongs to whoever made it (a user's launch)
// and must still reach torch. A sticky error (a lost context) cannot be
// cleared anyway; every later call reports it.
#pragma once

#include <cuda_runtime_api.h>

namespace pycomm::cuda {

inline void forget_own_error(cudaError_t err) {
  if (err != cudaSuccess && cudaPeekAtLastError() == err) cudaGetLastError();
}

}  // namespace pycomm::cuda
