// The one place where the torch releases pycomm builds against (2.11 and
// newer) differ. Everything else in csrc/torch is written once, for all.
//
// What differs, and how it is met:
// - PREMUL_SUM's factor: c10d::NCCLPreMulSumSupplement up to 2.12, renamed
//   c10d::PreMulSumSupplement in 2.13 (2.13 and 2.14 keep the old name as an
//   alias "for BC only", so it may go): pycomm::PreMulSumSupplement below.
// - Backend::getError() and Backend::setTimeout() throw by default up to 2.13
//   (2.14 returns SUCCESS, and warns and ignores): pycomm's FrontEnd overrides
//   both, so every release behaves as the newest (frontend.h).
// - SymmetricMemoryAllocator::has_allocation (what is_symm_mem_tensor asks)
//   came in 2.13: pycomm's CPU allocator overrides it from 2.13 on
//   (symmetric_memory.cpp); on 2.11 and 2.12 torch has no such question.
// - Methods that exist only in newer releases (Options::clone, the window,
//   reconfigure and abort-hook methods, the `*_single` collective names of
//   2.14) are not overridden: pycomm overrides the old entry points
//   (_allgather_base, _reduce_scatter_base, alltoall_base, the coalesced
//   forms), which every release has and 2.14's new names forward to.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/headeronly/version.h>

// True when the torch this is compiled against is major.minor or newer.
#define PYCOMM_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

static_assert(PYCOMM_TORCH_AT_LEAST(2, 11), "pycomm needs torch 2.11 or newer");

namespace pycomm {

#if PYCOMM_TORCH_AT_LEAST(2, 13)
using PreMulSumSupplement = c10d::PreMulSumSupplement;
#else
using PreMulSumSupplement = c10d::NCCLPreMulSumSupplement;
#endif

}  // namespace pycomm
