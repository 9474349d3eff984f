// A c10d backend that completes every call at once and moves no byte: what
// torch itself costs per call (its Python wrapper, the dispatcher, the Work
// handed back), measured through the same dist.* call a backend serves. The
// benches time it beside pycomm, gloo and Open MPI, so a per-call figure can
// be split into torch's share and the backend's (bench/harness/peers/
// torch_floor.py). Never a group's real backend: it returns its inputs as
// they are.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace pycomm {

c10::intrusive_ptr<c10d::Backend> make_null_backend(int rank, int size);

}  // namespace pycomm
