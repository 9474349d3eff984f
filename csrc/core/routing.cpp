#include "routing.h"

#include <string>

#include "errors.h"

namespace pycomm::core {
namespace {

bool reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduce || c == Collective::kReduceScatter;
}

Route host_route(const RouteQuery& q) {
  CollectiveTuning tuning;
  tuning.direct_max_bytes = q.direct_max_bytes;
  switch (q.collective) {
    case Collective::kAllReduce:
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return resolve_algorithm(collective_name(q.collective), Algorithm::kAuto, q.bytes,
                               q.local_size, tuning) == Algorithm::kRing
                 ? Route::kRing
                 : Route::kDirect;
    case Collective::kAllToAll: return Route::kPairwise;
    case Collective::kSend:
    case Collective::kRecv: return Route::kChannels;
    default: return Route::kDirect;
  }
}

// Across hosts. rs-ar-ag needs every host to split the message into the same
// L shards: equal rank counts, and at least one element per local rank.
Route hierarchical_route(const RouteQuery& q) {
  switch (q.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce:  // an all-reduce on a copy, kept by the root
      return q.uniform && q.bytes > q.leader_max_bytes && q.count >= size_t(q.local_size)
                 ? Route::kRsArAg
                 : Route::kLeader;
    case Collective::kAllGather:
    case Collective::kReduceScatter: return q.uniform ? Route::kLocalIndex : Route::kGloo;
    case Collective::kBroadcast: return Route::kRootHost;
    case Collective::kBarrier: return Route::kLeader;
    default: return Route::kGloo;  // all_to_all: gloo over the whole group, in pycomm's queue
  }
}

}  // namespace

Routed route(const RouteQuery& q) {
  const bool one_host_only = q.collective >= Collective::kGather;
  const bool pycomm_runs = (q.collective <= Collective::kBarrier || (one_host_only && q.hosts == 1)) &&
                           !q.sparse && (q.native_op || !reduces(q.collective));
  if (!pycomm_runs) return {Plan::kFallback, Route::kGloo};
  if (q.cuda) {
    // CUDA tensors: pycomm's own all-reduce on one host, for what its kernels
    // take; the rest, and everything across hosts, through gloo (which stages
    // them through the host).
    if (q.collective == Collective::kAllReduce && q.hosts == 1 && q.contiguous &&
        cuda_all_reduce_takes(q.dtype, q.op)) {
      return {Plan::kCuda, Route::kCudaIpc};
    }
    return {Plan::kFallback, Route::kGloo};
  }
  if (q.hosts > 1) return {Plan::kHierarchical, hierarchical_route(q)};
  return {Plan::kHost, host_route(q)};
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

Algorithm resolve_algorithm(const char* what, Algorithm requested, size_t bytes_per_rank, int world,
                            const CollectiveTuning& tuning) {
  if (requested != Algorithm::kAuto && requested != Algorithm::kDirect && requested != Algorithm::kRing) {
    throw InvalidArgument(std::string("algorithm: ") + what + " runs auto, direct or ring on CPU tensors");
  }
  if (requested != Algorithm::kAuto) return requested;
  return world > 1 && bytes_per_rank > tuning.direct_max_bytes ? Algorithm::kRing : Algorithm::kDirect;
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

const char* plan_name(Plan p) {
  switch (p) {
    case Plan::kHost: return "host";
    case Plan::kHierarchical: return "hierarchical";
    case Plan::kCuda: return "cuda";
    case Plan::kFallback: return "fallback";
  }
  return "unknown";
}

const char* route_name(Route r) {
  switch (r) {
    case Route::kDirect: return "direct";
    case Route::kRing: return "ring";
    case Route::kPairwise: return "pairwise";
    case Route::kLeader: return "leader";
    case Route::kRsArAg: return "rs-ar-ag";
    case Route::kLocalIndex: return "local-index";
    case Route::kRootHost: return "root-host";
    case Route::kCudaIpc: return "cuda-ipc";
    case Route::kChannels: return "channels";
    case Route::kGloo: return "gloo";
  }
  return "unknown";
}

}  // namespace pycomm::core
