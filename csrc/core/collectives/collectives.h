// The collectives over a session and its shared-memory data path, one .cpp
// each. They are the algorithms: they pick peers and chunks (ring_schedule.h)
// and call the data path to move bytes; the session checks that every rank
// entered the same collective (the fingerprint) and bounds every wait.
//
// Guarantees of every collective here:
//  - a mismatch (another kind, count, dtype, op, root, divisor or algorithm on
//    some rank) raises CollectiveMismatch on every rank before any byte moves;
//  - the algorithm is the caller's (the routing table's answer, routing.h):
//    none of them chooses one;
//  - a dead or stalled peer raises CommTimeout within the session's deadline;
//    an in-place collective with `restore` set puts its tensor back first;
//  - whatever every rank ends with (all-reduce, all-gather, broadcast) is
//    bitwise the same on every rank: one reduction order for all.
#pragma once

#include <cstddef>
#include <string>

#include "../collective.h"
#include "../dtypes.h"
#include "../errors.h"
#include "../kernels/thread_team.h"
#include "../transport/cross_memory.h"
#include "../transport/session.h"
#include "../transport/shm_data_path.h"
#include "input_backup.h"

namespace pycomm::core {

// A communicator's values come from the settings table (settings.h, through
// default_config); these initializers are what the native tests run with.
struct CollectiveTuning {
  // The routing table's: the one-shot direct algorithm up to this many bytes
  // per rank, the ring above (all-reduce, reduce-scatter, all-gather).
  size_t direct_max_bytes = 64;
  // The default of pycomm.all_reduce's restore_on_failure (see input_backup.h).
  bool restore_on_failure = true;
  // The CUDA path: each rank's device staging buffer (larger all-reduces go
  // through it in pieces).
  size_t cuda_buffer_bytes = 0;
  // The rank's thread team (kernels/thread_team.h): its size, and the least a
  // share of a piece holds.
  size_t team_threads = 1;
  size_t team_share_bytes = 32 * 1024;
  // The routing table's, where the ranks span NUMA domains: whether
  // all-reduces take two_level ("auto", "on" or "off": settings.h), and only
  // above this many bytes (and above direct_max_bytes).
  std::string two_level = "auto";
  size_t two_level_min_bytes = 256 * 1024;
  // Cross-memory attach (transport/cross_memory.h): "auto", "cma" or "off",
  // and the routing table's threshold for the single-copy collectives (and the
  // least a point-to-point message or an all-to-all block goes by it).
  std::string single_copy = "auto";
  size_t single_copy_min_bytes = 32 * 1024;
  size_t single_copy_rooted_max_bytes = size_t(1) << 20;
};

// What a collective runs on. One per communicator; one collective at a time.
struct Context {
  Session& session;
  ShmDataPath& path;
  InputBackup& backup;
  const CollectiveTuning& tuning;
  ThreadTeam& team;  // copies and reduces the large pieces
  const CrossMemory& cma;  // the single-copy collectives' reads (enabled() once agreed)
};

// all_reduce, all_gather and reduce_scatter run kDirect, kRing or
// kSingleCopy, all_reduce kTwoLevel too (`two_level`); anything else (kAuto
// included: the routing table resolves it) is InvalidArgument, and so is
// kSingleCopy where the group cannot read its peers' memory.
inline void check_single_copy(const char* what, const Context& ctx) {
  if (!ctx.cma.enabled()) {
    throw InvalidArgument(std::string("algorithm: ") + what + " runs single_copy only where the group's ranks "
                          "read each other's memory, and this group does not: " + ctx.cma.reason());
  }
}
inline void check_host_algorithm(const char* what, Algorithm a, const Context& ctx, bool two_level = false) {
  if (a == Algorithm::kSingleCopy) return check_single_copy(what, ctx);
  if (a == Algorithm::kDirect || a == Algorithm::kRing || (two_level && a == Algorithm::kTwoLevel)) return;
  if (a == Algorithm::kAuto) {
    throw InvalidArgument(std::string(what) + ": algorithm auto reached the core; the routing table "
                          "(routing.h) resolves it");
  }
  throw InvalidArgument(std::string("algorithm: ") + what + " runs auto, direct, ring" +
                        (two_level ? ", two_level" : "") + " or single_copy on CPU tensors");
}
// broadcast, gather and scatter: kDirect (through the slots) or kSingleCopy.
inline void check_staged_or_single_copy(const char* what, Algorithm a, const Context& ctx) {
  if (a == Algorithm::kSingleCopy) return check_single_copy(what, ctx);
  if (a != Algorithm::kDirect) {
    throw InvalidArgument(std::string("algorithm: ") + what + " runs direct or single_copy, not " +
                          algorithm_name(a));
  }
}

struct AllReduceArgs {
  void* data = nullptr;  // in place
  size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;  // direct, ring, or two_shot with peers (the CUDA path: direct, two_shot or ring)
  // avg divides the sum by this; 0 means the world size. A hierarchical scheme
  // sums inside a host and divides by the global count once.
  int divisor = 0;
  bool restore = true;  // put the input back if the collective fails part way
  // Symmetric memory (algorithm two_shot on CPU): every rank's copy of the
  // tensor, mapped here (peers[rank] == data), and where it lies (buffer
  // number << 40 | byte offset, the same on every rank). Each rank reduces its
  // share of every copy and writes it into every copy: no copy in or out, and
  // no restore (peers write this tensor too).
  char* const* peers = nullptr;
  uint64_t place = 0;
  // Algorithm two_level: each rank's NUMA domain, numbered 0..D-1 by lowest
  // rank (world entries, the same on every rank); null: one domain.
  const int* domain_of = nullptr;
};
void all_reduce(const Context& ctx, const AllReduceArgs& args);

struct BroadcastArgs {
  void* data = nullptr;  // root's input; every other rank's output
  size_t count = 0;
  DType dtype = DType::kFloat32;
  int root = 0;
  Algorithm algorithm = Algorithm::kDirect;  // or kSingleCopy
  bool restore = true;
};
void broadcast(const Context& ctx, const BroadcastArgs& args);

struct ReduceArgs {
  void* data = nullptr;  // every rank's input; the root's output (in place); others untouched
  size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int divisor = 0;
  bool restore = true;
};
void reduce(const Context& ctx, const ReduceArgs& args);

struct AllGatherArgs {
  const void* input = nullptr;  // count elements
  void* output = nullptr;       // world * count elements, rank r's at r * count
  // Or, where rank r's count elements go, rank by rank (all_gather's list
  // form; kDirect and kSingleCopy only): then `output` is unused.
  void* const* outputs = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  Algorithm algorithm = Algorithm::kAuto;  // direct or ring
};
void all_gather(const Context& ctx, const AllGatherArgs& args);

struct ReduceScatterArgs {
  const void* input = nullptr;  // world * count elements; chunk r is rank r's
  void* output = nullptr;       // count elements: chunk `rank` reduced over all ranks
  size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;  // direct or ring
  int divisor = 0;
};
void reduce_scatter(const Context& ctx, const ReduceScatterArgs& args);

struct AllToAllArgs {
  // Per peer: where this rank's block for it starts and how many elements it
  // has, and where the block from it goes and how many elements it has. Send
  // and receive sizes must pair up across ranks (checked on every rank).
  const void* const* send = nullptr;
  const size_t* send_counts = nullptr;
  void* const* recv = nullptr;
  const size_t* recv_counts = nullptr;
  DType dtype = DType::kFloat32;
};
void all_to_all(const Context& ctx, const AllToAllArgs& args);

// Rooted, one host: point-to-point at heart, but every rank of the group
// takes part, so they are collectives here, with their checks.
struct GatherArgs {
  const void* input = nullptr;  // count elements
  void* output = nullptr;       // the root's: world * count elements, rank r's at r * count
  void* const* outputs = nullptr;  // or, the root's: where rank r's count elements go
  size_t count = 0;
  DType dtype = DType::kFloat32;
  int root = 0;
  Algorithm algorithm = Algorithm::kDirect;  // or kSingleCopy
};
void gather(const Context& ctx, const GatherArgs& args);

struct ScatterArgs {
  const void* input = nullptr;  // the root's: world * count elements, rank r's at r * count
  const void* const* inputs = nullptr;  // or, the root's: where rank r's count elements lie
  void* output = nullptr;       // count elements
  size_t count = 0;
  DType dtype = DType::kFloat32;
  int root = 0;
  Algorithm algorithm = Algorithm::kDirect;  // or kSingleCopy
};
void scatter(const Context& ctx, const ScatterArgs& args);

void barrier(const Context& ctx);

}  // namespace pycomm::core
