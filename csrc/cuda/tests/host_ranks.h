// What the CUDA kernels' host-thread tests share: the kernel bodies run on
// host threads (one per rank and block) over a host's ranks' staging buffers
// and signal pads in host memory (HostRanks), as the launcher would see them
// on a GPU.
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "../../core/kernels/reduce_kernels.h"
#include "../../core/ring_schedule.h"
#include "../../core/routing.h"
#include "../../core/tests/check.h"
#include "../all_reduce_args.h"
#include "../all_reduce_dispatch.h"
#include "../one_shot_all_reduce.cuh"
#include "../ring_all_reduce.cuh"
#include "../two_shot_all_reduce.cuh"

namespace {

using namespace pycomm;
using core::Algorithm;
using cuda::CudaAllReduceArgs;
using cuda::DeviceStatus;
using cuda::Lanes;
using cuda::SignalPad;
using core::DType;
using core::ReduceOp;

constexpr Algorithm kAlgorithms[] = {Algorithm::kDirect, Algorithm::kTwoShot, Algorithm::kRing};
constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                             DType::kInt8,    DType::kUInt8,   DType::kInt32,   DType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct};
constexpr uint64_t kPatientNs = 60'000'000'000;  // no false timeouts, however slow the sanitizer

struct alignas(64) Line {
  unsigned char bytes[64];
};

// The memory of a host's ranks, as the launcher would see it on a GPU.
struct HostRanks {
  HostRanks(int world, size_t buffer_bytes) : pads(new SignalPad[size_t(world)]()), status(size_t(world)) {
    for (int r = 0; r < world; ++r) buffers.emplace_back(new Line[buffer_bytes / sizeof(Line) + 1]());
    peers.buffer_bytes = buffer_bytes;
    for (int r = 0; r < world; ++r) {
      peers.buffers[r] = buffers[size_t(r)].get();
      peers.pads[r] = &pads[size_t(r)];
    }
  }
  // Rank r's all-reduce, in place, of `count` float32 at `data` by `blocks`
  // blocks, each launch bounded by `timeout_ns`.
  CudaAllReduceArgs float_args(int r, float* data, size_t count, ReduceOp op, Algorithm algorithm, int blocks,
                               uint64_t timeout_ns) {
    CudaAllReduceArgs a{};
    a.rank = r;
    a.world = int(status.size());
    a.peers = peers;
    a.input = a.output = data;
    a.count = count;
    a.dtype = DType::kFloat32;
    a.op = op;
    a.algorithm = algorithm;
    a.timeout_ns = timeout_ns;
    a.status = &status[size_t(r)];
    a.blocks = blocks;
    return a;
  }

  std::vector<std::unique_ptr<Line[]>> buffers;
  std::unique_ptr<SignalPad[]> pads;
  std::vector<DeviceStatus> status;
  cuda::PeerMemory peers{};
};

template <class T, class R>
bool run_body(Algorithm algorithm, const CudaAllReduceArgs& a, const Lanes& l) {
  switch (algorithm) {
    case Algorithm::kDirect: return cuda::one_shot_all_reduce<T, R, cuda::HostBlockSync>(a, l);
    case Algorithm::kTwoShot: return cuda::two_shot_all_reduce<T, R, cuda::HostBlockSync>(a, l);
    case Algorithm::kRing: return cuda::ring_all_reduce<T, R, cuda::HostBlockSync>(a, l);
    default: return false;
  }
}

// Block `l.block` of a rank's launch, as the GPU would run it.
bool run_block(const CudaAllReduceArgs& a, const Lanes& l) {
  bool ok = false;
  const bool known = cuda::dispatch_reduction(a.dtype, a.op, [&](auto type, auto reduction) {
    ok = run_body<decltype(type), decltype(reduction)>(a.algorithm, a, l);
  });
  return known && ok;
}


}  // namespace
