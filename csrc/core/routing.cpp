#include "routing.h"

namespace pycomm::core {
namespace {

bool reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduce || c == Collective::kReduceScatter;
}

// The CUDA kernels by size, untuned until measured on a GPU
// (csrc/cuda/bench/threads_all_reduce_bench.cu). One-shot has one barrier
// before its reads but reads world - 1 peers' whole inputs; two-shot reads
// 2 (world-1)/world of the data in two rounds; the ring reads as much in
// 2 (world-1) steps, from one neighbour only. With two ranks one-shot reads no
// more than the others.
Algorithm cuda_algorithm(int world, size_t bytes) {
  if (world <= 2 || bytes <= (size_t(256) << 10)) return Algorithm::kDirect;
  if (bytes <= (size_t(8) << 20)) return Algorithm::kTwoShot;
  return Algorithm::kRing;
}

// Whether an all-reduce the ring would run takes two_level. Domains of one
// rank never: that rank would reduce every piece whole, alone (the one-shot's
// reads). auto: where it moves no more bytes a rank than the ring
// (pycomm/tools/scaling/cores.py: 5 + (D+2)/L times the tensor against
// 6 - 4/R, with L the smallest domain's ranks: 6 a domain with 2 domains),
// and then crosses between domains half as much, in one step per piece.
bool takes_two_level(const RouteQuery& q) {
  if (q.two_level == TwoLevel::kOff || q.domains < 2 || q.smallest_domain < 2 ||
      q.bytes <= q.two_level_min_bytes ||
      host_algorithm(q.bytes, q.local_size, q.direct_max_bytes) != Algorithm::kRing) {
    return false;
  }
  const double d = q.domains, l = q.smallest_domain, r = q.local_size;
  return q.two_level == TwoLevel::kOn || 5 + (d + 2) / l <= 6 - 4 / r;
}

// Whether a collective of one host goes by its single-copy form (routing.h).
// Measured on the 2-core host, 2 ranks, against the staging path in turns
// (bench/collectives_perf.py, docs/performance.md): all_gather and
// reduce_scatter gain from 32 KiB up (all_gather 1 MiB: 50 us against 82);
// broadcast, gather and scatter only up to single_copy_rooted_max_bytes
// (broadcast 512 KiB: 22 us against 33; 2 MiB: 199 against 158), above which
// the staging path's two copies overlap on two cores while the single copy
// leaves the root's core idle; all_reduce's single-copy form never beat the
// ring there (16 MiB: 1984 us against 1957; 1 MiB: 163 against 112), so it
// runs only where asked for.
bool takes_single_copy(const RouteQuery& q) {
  if (!q.single_copy || q.local_size < 2 || q.bytes == 0 || q.bytes < q.single_copy_min_bytes) return false;
  switch (q.collective) {
    case Collective::kAllGather:
    case Collective::kReduceScatter: return true;
    case Collective::kBroadcast:
    case Collective::kGather:
    case Collective::kScatter: return q.bytes <= q.single_copy_rooted_max_bytes;
    default: return false;
  }
}

// all_reduce, all_gather and reduce_scatter: what was asked for, else the
// single copy where it gains, else direct or the ring by size.
Algorithm host_rule(const RouteQuery& q) {
  if (q.requested != Algorithm::kAuto) return q.requested;
  if (takes_single_copy(q)) return Algorithm::kSingleCopy;
  return host_algorithm(q.bytes, q.local_size, q.direct_max_bytes);
}

Algorithm host_route(const RouteQuery& q) {
  switch (q.collective) {
    case Collective::kAllReduce: {
      if (q.requested == Algorithm::kAuto && takes_two_level(q)) return Algorithm::kTwoLevel;
      // A symmetric tensor large enough for the ring is reduced where it lies,
      // in every rank's copy, with no copy in or out. A small one keeps the
      // one-shot: its copy into a slot costs less than the second
      // synchronization an in-place reduction needs.
      const Algorithm a = host_rule(q);
      return a == Algorithm::kRing && q.symmetric ? Algorithm::kTwoShot : a;
    }
    case Collective::kAllGather:
    case Collective::kReduceScatter: return host_rule(q);
    case Collective::kBroadcast:
    case Collective::kGather:
    case Collective::kScatter:
      return takes_single_copy(q) ? Algorithm::kSingleCopy : Algorithm::kDirect;
    case Collective::kAllToAll: return Algorithm::kPairwise;
    case Collective::kSend:
    case Collective::kRecv: return Algorithm::kChannels;
    default: return Algorithm::kDirect;
  }
}

// Across hosts. rs-ar-ag needs every host to split the message into the same
// L shards: equal rank counts, and at least one element per local rank.
Algorithm hierarchical_route(const RouteQuery& q) {
  switch (q.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce:  // an all-reduce on a copy, kept by the root
      return q.uniform && q.bytes > q.leader_max_bytes && q.count >= size_t(q.local_size)
                 ? Algorithm::kRsArAg
                 : Algorithm::kLeader;
    case Collective::kAllGather:
    case Collective::kReduceScatter: return q.uniform ? Algorithm::kLocalIndex : Algorithm::kGloo;
    case Collective::kBroadcast: return Algorithm::kRootHost;
    case Collective::kBarrier: return Algorithm::kLeader;
    default: return Algorithm::kGloo;  // all_to_all: gloo over the whole group, in pycomm's queue
  }
}

}  // namespace

Route route(const RouteQuery& q) {
  const bool one_host_only = q.collective >= Collective::kGather;
  const bool pycomm_runs = (q.collective <= Collective::kBarrier || (one_host_only && q.hosts == 1)) &&
                           !q.sparse && (q.native_op || !reduces(q.collective));
  if (!pycomm_runs) return {PlanKind::kFallback, Algorithm::kGloo};
  if (q.cuda) {
    // CUDA tensors: pycomm's own all-reduce on one host, for what its kernels
    // take; the rest, and everything across hosts, through gloo (which stages
    // them through the host).
    if (q.collective == Collective::kAllReduce && q.hosts == 1 && q.contiguous &&
        cuda_all_reduce_takes(q.dtype, q.op)) {
      return {PlanKind::kCuda, q.requested != Algorithm::kAuto ? q.requested
                                                             : cuda_algorithm(q.local_size, q.bytes)};
    }
    return {PlanKind::kFallback, Algorithm::kGloo};
  }
  if (q.hosts > 1) return {PlanKind::kHierarchical, hierarchical_route(q)};
  return {PlanKind::kHost, host_route(q)};
}

bool parse_two_level(const std::string& name, TwoLevel* out) {
  if (name == "auto") *out = TwoLevel::kAuto;
  else if (name == "on") *out = TwoLevel::kOn;
  else if (name == "off") *out = TwoLevel::kOff;
  else return false;
  return true;
}

Algorithm host_algorithm(size_t bytes_per_rank, int local_size, size_t direct_max_bytes) {
  return local_size > 1 && bytes_per_rank > direct_max_bytes ? Algorithm::kRing : Algorithm::kDirect;
}

bool cuda_all_reduce_takes(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt32:
    case DType::kInt64: break;
    default: return false;
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
    case ReduceOp::kMin:
    case ReduceOp::kProduct: return true;
    case ReduceOp::kAvg: return is_floating(dtype);
    default: return false;
  }
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kBarrier: return "barrier";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kSend: return "send";
    case Collective::kRecv: return "recv";
  }
  return "unknown";
}

const char* plan_name(PlanKind r) {
  switch (r) {
    case PlanKind::kHost: return "host";
    case PlanKind::kHierarchical: return "hierarchical";
    case PlanKind::kCuda: return "cuda";
    case PlanKind::kFallback: return "fallback";
  }
  return "unknown";
}

}  // namespace pycomm::core
