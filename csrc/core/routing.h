// The one routing table: which plan and which algorithm a collective takes,
// from what every rank of a group knows alike (the collective, the layout of
// its hosts, the message's size, the settings), so every rank routes the same
// way. The c10d front-end (csrc/torch/frontend.cpp) picks its plan with it,
// the plans pick their algorithm with it, and Python reads the same rule
// through pycomm._tables (pycomm/routing.py): `pycomm doctor`,
// topology.HostLayout.plan() and the scaling model restate nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collective.h"
#include "collectives/collectives.h"

namespace pycomm::core {

enum class Collective : uint8_t {
  kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kBarrier,
  // pycomm's on one host; the fallback's across hosts.
  kGather, kScatter, kSend, kRecv,
};
inline constexpr int kCollectives = int(Collective::kRecv) + 1;

enum class Plan : uint8_t {
  kHost,          // this host's shared memory: one core collective (host_plan.cpp)
  kHierarchical,  // shared memory inside each host, another backend between them
  kCuda,          // the CUDA IPC all-reduce of one host (cuda_path.cpp)
  kFallback,      // the group-wide gloo backend, queued after pycomm's work
};
inline constexpr int kPlans = int(Plan::kFallback) + 1;

enum class Route : uint8_t {
  kDirect,       // one shot through the slots (host)
  kRing,         // the pipelined ring (host)
  kPairwise,     // all_to_all's pairwise steps (host)
  kLeader,       // reduce to each host's first rank, all-reduce among those, broadcast
  kRsArAg,       // reduce-scatter in the host, all-reduce a 1/L shard between hosts, all-gather
  kLocalIndex,   // all_gather / reduce_scatter: between hosts among the ranks of one local index
  kRootHost,     // broadcast: the root's host, then its leader to the others, then each host
  kCudaIpc,      // one-shot or two-shot over CUDA IPC (the kernel launch picks, all_reduce_args.h)
  kChannels,     // send/recv: the point-to-point channels and their progress loop (host)
  kGloo,         // what the fallback backend runs
};
inline constexpr int kRoutes = int(Route::kGloo) + 1;

struct Routed {
  Plan plan;
  Route route;
};

// What decides the route of one call. Every field is the same on every rank.
// The dtype and the layout decide nothing on the CPU: every dtype and layout
// is pycomm's there (the front-end stages what is not contiguous, and
// refuses, as gloo does, an op a dtype has no arithmetic for).
struct RouteQuery {
  Collective collective = Collective::kAllReduce;
  bool cuda = false;       // a tensor is on a CUDA device
  bool sparse = false;     // a tensor is sparse or of another non-strided layout (gloo's)
  bool native_op = true;   // the reduction is one pycomm maps (every c10d op of torch 2.14 but UNUSED)
  DType dtype = DType::kFloat32;  // the core's element type (complex: its real component's)
  ReduceOp op = ReduceOp::kSum;   // the reduction (collectives that reduce)
  bool contiguous = true;  // every tensor is contiguous (the CUDA path stages none)
  int hosts = 1;           // hosts the group spans
  bool uniform = true;     // every host has the same number of ranks
  int local_size = 1;      // ranks on a host (on this rank's host; uniform: on every host)
  size_t count = 0;        // elements per rank's input (all_reduce: of the tensor)
  size_t bytes = 0;        // count times the element size
  size_t direct_max_bytes = 0;  // CollectiveTuning::direct_max_bytes
  size_t leader_max_bytes = 0;  // HierarchyTuning::leader_max_bytes
};

Routed route(const RouteQuery& q);

// The (dtype, op) pairs the CUDA all-reduce's kernels take: the eight dtypes
// they were written for and the arithmetic ops (avg: floating types). Its
// dispatch (csrc/cuda/all_reduce_dispatch.h) is checked against this in
// csrc/cuda/tests/test_cuda_protocol.cpp; other CUDA tensors take the fallback.
bool cuda_all_reduce_takes(DType dtype, ReduceOp op);

const char* collective_name(Collective c);
const char* plan_name(Plan p);
const char* route_name(Route r);

// algorithm="auto" on one host: direct up to tuning.direct_max_bytes per rank,
// the ring above; an explicit direct or ring is kept. (all_reduce,
// reduce_scatter, all_gather; the same choice route() reports.)
Algorithm resolve_algorithm(const char* what, Algorithm requested, size_t bytes_per_rank, int world,
                            const CollectiveTuning& tuning);

}  // namespace pycomm::core
