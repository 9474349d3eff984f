// One all-reduce, decided once. Every way in states what it was asked in an
// AllReduceCall, mapping its op once (Reduction::of, Reduction::named): c10d's
// allreduce and allreduce_coalesced (frontend_all_reduce.cpp), pycomm.all_reduce
// (module.cpp) and torch.ops.pycomm.all_reduce_ (all_reduce_op.cpp). The
// front-end's entry, FrontEnd::all_reduce_call, then decides the rest in one
// function (FrontEnd::resolve): what runs it (the routing table's plan),
// each tensor's core dtype and algorithm (a tensor in symmetric memory is a
// field of the table's query, and its two_shot the table's answer), and
// restore's default. The job, the plans and the CUDA path read the steps it
// made; none of them decides again.
#pragma once

#include <c10/util/SmallVector.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>

#include "../core/routing.h"
#include "plan.h"

namespace pycomm {

// The core's reduction of a call, with premul_sum's factor.
struct Reduction {
  core::ReduceOp op = core::ReduceOp::kSum;
  bool premul = false;  // premul_sum: a sum of the inputs, each scaled by `factor` first
  double factor = 1.0;
  bool native = true;  // false for an op pycomm does not know (c10d's UNUSED, later ones)

  // c10d's op (dist.*: every collective of the backend that reduces).
  static Reduction of(const c10d::ReduceOp& op);
  // A name of core::kReduceOps (pycomm.all_reduce's op="sum", the op's):
  // ValueError otherwise, its message beginning with `prefix`.
  static Reduction named(const std::string& name, const char* prefix = "");
};

// A name of core::kAllReduceAlgorithms (pycomm.all_reduce's algorithm="ring"):
// ValueError otherwise.
core::Algorithm all_reduce_algorithm_named(const std::string& name);

struct AllReduceCall {
  // ---- Stated by the way in.
  Reduction reduction;
  // Asked for: kept where there is a choice (one host, CUDA); auto is the
  // routing table's pick by size.
  core::Algorithm requested = core::Algorithm::kAuto;
  // Put the tensor back if the collective fails part way (CPU, one host);
  // none: the communicator's restore_on_failure. c10d's calls never do (DDP
  // drops a failed step's buckets).
  std::optional<bool> restore;
  bool async_op = false;
  bool blocking = false;   // run to the end and return no Work (null): the caller waits anyway
  bool coalesced = false;  // allreduce_coalesced's (what its fallback gets)
  // c10d's own options, handed to the fallback as they came; null
  // (pycomm.all_reduce, the op): the fallback's are made from `reduction`.
  const c10d::AllreduceOptions* options = nullptr;

  // ---- Decided by FrontEnd::resolve, once.
  core::PlanKind plan = core::PlanKind::kHost;
  c10::SmallVector<AllReduceStep, 1> steps;  // one per tensor (none for the fallback)
};

}  // namespace pycomm
