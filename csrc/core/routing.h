// The one routing table: what runs a collective and how, from what every rank
// of a group knows alike (the collective, the layout of its hosts, the
// message's size, the settings, the algorithm the caller asked for), so every
// rank routes the same way. The c10d front-end (csrc/torch/frontend*.cpp) asks
// it once per call and hands its whole answer down: the plans and the core's
// collectives run the algorithm they are given and never choose again. Python
// reads the same rule (pycomm/routing.py): `pycomm doctor`,
// topology.HostLayout.plan() and the scaling model restate nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collective.h"

namespace pycomm::core {

enum class Collective : uint8_t {
  kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kBarrier,
  // pycomm's on one host; the fallback's across hosts.
  kGather, kScatter, kSend, kRecv,
};
inline constexpr int kCollectives = int(Collective::kRecv) + 1;

// What runs a call: one of the front-end's plans (csrc/torch/plan.h), its
// CUDA path, or its fallback backend.
enum class PlanKind : uint8_t {
  kHost,          // the host plan: one core collective over this host's shared memory
  kHierarchical,  // the hierarchical plan: shared memory inside each host, another backend between them
  kCuda,          // the CUDA IPC all-reduce of one host (csrc/torch/cuda_path.h)
  kFallback,      // the group-wide gloo backend, queued after pycomm's work
};
inline constexpr int kPlanKinds = int(PlanKind::kFallback) + 1;

// The two_level setting (settings.h).
enum class TwoLevel : uint8_t { kAuto, kOn, kOff };
// "auto", "on" or "off"; false for anything else.
bool parse_two_level(const std::string& name, TwoLevel* out);

// The table's answer: its algorithm is never kAuto.
struct Route {
  PlanKind plan;
  Algorithm algorithm;
};

// What decides the route of one call. Every field is the same on every rank.
// The dtype and the layout decide nothing on the CPU: every dtype and layout
// is pycomm's there (the front-end stages what is not contiguous, and
// refuses, as gloo does, an op a dtype has no arithmetic for).
struct RouteQuery {
  Collective collective = Collective::kAllReduce;
  // What the caller asked for (pycomm.all_reduce's algorithm=): kept where the
  // plan has a choice (one host, CUDA), else ignored. The core's collectives
  // and the CUDA path refuse one they do not run.
  Algorithm requested = Algorithm::kAuto;
  bool cuda = false;       // a tensor is on a CUDA device
  bool sparse = false;     // a tensor is sparse or of another non-strided layout (gloo's)
  bool native_op = true;   // the reduction is one pycomm maps (every c10d op of torch 2.14 but UNUSED)
  DType dtype = DType::kFloat32;  // the core's element type (complex: its real component's)
  ReduceOp op = ReduceOp::kSum;   // the reduction (collectives that reduce)
  bool contiguous = true;  // every tensor is contiguous (the CUDA path stages none)
  // all_reduce on one host: the tensor lies, contiguous, in symmetric memory
  // rendezvoused on this group (csrc/torch/symmetric_memory.h), so every
  // rank's copy is mapped and the ring's messages are reduced in place by
  // two_shot instead.
  bool symmetric = false;
  int hosts = 1;           // hosts the group spans
  bool uniform = true;     // every host has the same number of ranks
  int local_size = 1;      // ranks on a host (on this rank's host; uniform: on every host)
  size_t count = 0;        // elements per rank's input (all_reduce: of the tensor)
  size_t bytes = 0;        // count times the element size
  size_t direct_max_bytes = 0;  // CollectiveTuning::direct_max_bytes
  size_t leader_max_bytes = 0;  // HierarchyTuning::leader_max_bytes
  // One host: the NUMA domains its ranks are pinned to (1: one, or unknown),
  // the ranks of the smallest, and CollectiveTuning::two_level and
  // two_level_min_bytes.
  int domains = 1;
  int smallest_domain = 0;
  TwoLevel two_level = TwoLevel::kAuto;
  size_t two_level_min_bytes = 0;
  // One host: whether its ranks read each other's memory (agreed at set-up,
  // transport/cross_memory.h), and CollectiveTuning::single_copy_min_bytes and
  // single_copy_rooted_max_bytes.
  bool single_copy = false;
  size_t single_copy_min_bytes = 0;
  size_t single_copy_rooted_max_bytes = 0;
};

Route route(const RouteQuery& q);

// The rule for one host's all_reduce, reduce_scatter and all_gather: direct up
// to direct_max_bytes of input per rank, the ring above (one rank: direct).
// Where the ranks read each other's memory, route() sends all_gather and
// reduce_scatter of at least single_copy_min_bytes a rank to the single-copy
// form instead, and broadcast, gather and scatter of that size up to
// single_copy_rooted_max_bytes (routing.cpp says why); all_reduce takes it
// only where asked for, and reduce keeps its staging (read by the root alone,
// the whole reduction would fall to one core); all_to_all stays pairwise, and
// its blocks of single_copy_min_bytes and more go straight (each sender says
// which, so a block's two ends never disagree).
// route() answers it for a call on one host (where the ranks span NUMA
// domains of two ranks or more, an all_reduce the ring would run may take
// two_level instead, and one of a symmetric tensor two_shot: routing.cpp); the
// hierarchical plan applies it to the host steps it composes (its own,
// smaller, messages).
Algorithm host_algorithm(size_t bytes_per_rank, int local_size, size_t direct_max_bytes);

// The (dtype, op) pairs the CUDA all-reduce's kernels take: the eight dtypes
// they were written for and the arithmetic ops (avg: floating types). Its
// dispatch (csrc/cuda/all_reduce_dispatch.h) is checked against this in
// csrc/cuda/tests/test_cuda_protocol.cpp; other CUDA tensors take the fallback.
bool cuda_all_reduce_takes(DType dtype, ReduceOp op);

const char* collective_name(Collective c);
const char* plan_name(PlanKind r);
// (algorithm_name: collective.h.) route() answers every Algorithm but kAuto.

}  // namespace pycomm::core
