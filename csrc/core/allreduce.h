// All-reduce algorithms over the shared-memory transport.
#pragma once

#include <cstddef>

#include "collective.h"
#include "dtypes.h"
#include "input_backup.h"
#include "shm_transport.h"

namespace pycomm::core {

struct AllReduceArgs {
  void* data = nullptr;  // in place
  size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;
};

struct AllReduceTuning {
  // algorithm="auto" runs the one-shot direct algorithm up to this many bytes
  // and the ring above it.
  size_t direct_max_bytes = 32 * 1024;
  // Restore the input when a collective fails part way (see input_backup.h).
  bool restore_on_failure = true;
};

// Resolves kAuto by message size; every rank resolves the same way.
Algorithm resolve_algorithm(const AllReduceArgs& args, const ShmTransport& t,
                            const AllReduceTuning& tuning);

// Runs one all-reduce. On CommTimeout the tensor holds its input again; on
// CollectiveMismatch it was never touched.
void all_reduce(ShmTransport& t, const AllReduceArgs& args, const AllReduceTuning& tuning,
                InputBackup& backup);

// Waits until every rank has entered; raises CollectiveMismatch if a rank
// entered another collective.
void barrier(ShmTransport& t);

}  // namespace pycomm::core
