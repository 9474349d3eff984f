// The vocabulary ranks agree on when they enter a collective: its kind, its
// algorithm, and the fingerprint every rank publishes at the handshake. Two
// ranks that publish different fingerprints are in different collectives, and
// every rank raises CollectiveMismatch before any byte moves.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "dtypes.h"

namespace pycomm::core {

// What a handshake is for, as its fingerprint states it: a collective (a CPU
// and a CUDA all-reduce apart) or the CUDA path's set-up. Its values are
// what ranks compare, so they never change. The routing table's list of
// collectives (routing.h's Collective) is another thing: what a call asks for.
enum class FingerprintKind : uint32_t {
  kAllReduce = 1,
  kBarrier = 2,
  kBroadcast = 3,
  kReduce = 4,
  kAllGather = 5,
  kReduceScatter = 6,
  kAllToAll = 7,
  // The CUDA path's: a CPU and a CUDA all-reduce of the same shape are
  // different collectives (they meet in different buffers).
  kCudaAllReduce = 8,
  kCudaSetup = 9,  // the peers exchange and map their device memory
  kGather = 10,
  kScatter = 11,
};

// How a collective runs: the routing table's answer (routing.h) for every
// call, and what every rank fingerprints, so that ranks that run different
// algorithms are in different collectives. Only a caller asks for kAuto.
enum class Algorithm : uint32_t {
  kAuto = 0,  // asked for: the routing table picks one of the others
  // One host's shared memory; kDirect, kTwoShot and kRing are also the CUDA
  // all-reduce's kernels (csrc/cuda).
  kDirect = 1,    // one shot: every rank reads every peer's slot (buffer) after a handshake
  kRing = 2,      // pipelined ring over the links to rank+1 (reduce-scatter and/or all-gather)
  kPairwise = 3,  // all-to-all: one link per peer pair, w-1 steps
  kTwoShot = 4,   // CUDA: each rank reduces its chunk from every peer's buffer, then an all-gather
  // Across hosts (csrc/torch/hierarchical_plan.h):
  kLeader = 5,      // reduce to each host's first rank, all-reduce among those, broadcast
  kRsArAg = 6,      // reduce-scatter in the host, all-reduce a 1/L shard between hosts, all-gather
  kLocalIndex = 7,  // all_gather, reduce_scatter: between hosts among the ranks of one local index
  kRootHost = 8,    // broadcast: the root's host, then its leader to the others, then each host
  kChannels = 9,    // send/recv: the point-to-point channels and their progress loop (host)
  kGloo = 10,       // what the fallback backend runs
  // One host whose ranks span NUMA domains (collectives/two_level.h): reduce
  // in each domain, exchange shards between domains, gather in each domain.
  kTwoLevel = 11,
  // One host whose ranks read each other's memory (transport/cross_memory.h):
  // each rank copies what it needs straight out of its peers' tensors, once,
  // between a handshake that announces them and one that releases them.
  kSingleCopy = 12,
};
inline constexpr int kAlgorithms = int(Algorithm::kSingleCopy) + 1;

// What a rank declares when it enters a collective. Plain data: it is written
// into shared memory and compared field by field. Layout version 2 added root
// and divisor, 5 place (bump kLayoutVersion in session_layout.h when this changes).
struct Fingerprint {
  uint64_t count = 0;      // elements per rank (all_gather: input; reduce_scatter: output)
  uint32_t kind = 0;       // FingerprintKind
  uint32_t dtype = 0;      // DType
  uint32_t op = 0;         // ReduceOp (0 where the collective does not reduce)
  uint32_t algorithm = 0;  // Algorithm, never kAuto
  int32_t root = -1;       // broadcast, reduce, gather, scatter; -1 elsewhere
  uint32_t divisor = 0;    // avg: what the sum is divided by; 0 elsewhere
  // An all-reduce in place in symmetric memory: which buffer and where in it
  // (AllReduceArgs::place); 0 elsewhere. Ranks must agree on it, since each
  // reads and writes the others' copies at its own offset.
  uint64_t place = 0;
  bool operator==(const Fingerprint& o) const {
    return count == o.count && kind == o.kind && dtype == o.dtype && op == o.op &&
           algorithm == o.algorithm && root == o.root && divisor == o.divisor && place == o.place;
  }
  bool operator!=(const Fingerprint& o) const { return !(*this == o); }
};

// A collective's fingerprint. `op` where it reduces (avg records its divisor:
// ranks that divide by different counts are in different collectives), `root`
// for broadcast and reduce.
inline Fingerprint fingerprint_of(FingerprintKind kind, uint64_t count, DType dtype,
                                  Algorithm algorithm, const ReduceOp* op = nullptr,
                                  int divisor = 0, int root = -1) {
  Fingerprint fp;
  fp.kind = uint32_t(kind);
  fp.count = count;
  fp.dtype = uint32_t(dtype);
  fp.algorithm = uint32_t(algorithm);
  fp.op = op ? uint32_t(*op) : 0;
  fp.divisor = op && *op == ReduceOp::kAvg ? uint32_t(divisor) : 0;
  fp.root = root;
  return fp;
}

inline const char* kind_name(uint32_t k) {
  switch (FingerprintKind(k)) {
    case FingerprintKind::kAllReduce: return "all_reduce";
    case FingerprintKind::kBarrier: return "barrier";
    case FingerprintKind::kBroadcast: return "broadcast";
    case FingerprintKind::kReduce: return "reduce";
    case FingerprintKind::kAllGather: return "all_gather";
    case FingerprintKind::kReduceScatter: return "reduce_scatter";
    case FingerprintKind::kAllToAll: return "all_to_all";
    case FingerprintKind::kCudaAllReduce: return "all_reduce (cuda)";
    case FingerprintKind::kCudaSetup: return "cuda set-up";
    case FingerprintKind::kGather: return "gather";
    case FingerprintKind::kScatter: return "scatter";
  }
  return "unknown";
}

inline const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kRing: return "ring";
    case Algorithm::kPairwise: return "pairwise";
    case Algorithm::kTwoShot: return "two_shot";
    case Algorithm::kLeader: return "leader";
    case Algorithm::kRsArAg: return "rs-ar-ag";
    case Algorithm::kLocalIndex: return "local-index";
    case Algorithm::kRootHost: return "root-host";
    case Algorithm::kChannels: return "channels";
    case Algorithm::kGloo: return "gloo";
    case Algorithm::kTwoLevel: return "two_level";
    case Algorithm::kSingleCopy: return "single_copy";
  }
  return "unknown";
}

// The algorithms pycomm.all_reduce takes by name, in the order errors list
// them (two_shot: CUDA tensors only; two_level and single_copy: CPU tensors only).
inline constexpr Algorithm kAllReduceAlgorithms[] = {Algorithm::kAuto,    Algorithm::kRing,
                                                     Algorithm::kDirect,  Algorithm::kTwoShot,
                                                     Algorithm::kTwoLevel, Algorithm::kSingleCopy};

inline std::string describe(const Fingerprint& fp) {
  std::ostringstream os;
  os << kind_name(fp.kind);
  if (FingerprintKind(fp.kind) == FingerprintKind::kBarrier) return os.str() + "()";
  os << "(count=" << fp.count << ", dtype=" << dtype_label(DType(fp.dtype));
  if (fp.op) os << ", op=" << op_name(ReduceOp(fp.op));
  if (fp.divisor) os << ", divisor=" << fp.divisor;
  if (fp.root >= 0) os << ", root=" << fp.root;
  if (fp.place) os << ", symmetric buffer " << (fp.place >> 40) << " at byte " << (fp.place & ((uint64_t(1) << 40) - 1));
  os << ", algorithm=" << algorithm_name(Algorithm(fp.algorithm)) << ")";
  return os.str();
}

// The first field in which two fingerprints differ, for the error message.
inline const char* first_difference(const Fingerprint& a, const Fingerprint& b) {
  if (a.kind != b.kind) return "collective";
  if (a.count != b.count) return "count";
  if (a.dtype != b.dtype) return "dtype";
  if (a.op != b.op) return "op";
  if (a.root != b.root) return "root";
  if (a.divisor != b.divisor) return "divisor";
  if (a.algorithm != b.algorithm) return "algorithm";
  if (a.place != b.place) return "place in symmetric memory";
  return "nothing";
}

}  // namespace pycomm::core
