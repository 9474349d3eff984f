// The CUDA all-reduce kernels' protocol, proven on the CPU: the real kernel
// bodies (one_shot / two_shot / ring_all_reduce.cuh) run on host threads, one
// per (rank, block), over staging buffers and signal pads in host memory and
// std::atomic_ref flags, under ThreadSanitizer in CI (scripts/native_tests.sh).
//
// Each thread runs its block of many launches back to back, so fast ranks
// start launch i+1 while slow ones are still in launch i, reusing the pads
// with increasing epochs: looser than a GPU (where a rank's next launch waits
// for all its blocks), which the protocol allows since blocks are independent.
// Results are checked bit for bit against the CPU core's reduce_sources (rank
// order) and across ranks. Data are small integers, so every order of
// combination (the ring's included) is exact and gives the same bits.
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
using cuda::CudaAlgorithm;
using cuda::CudaAllReduceArgs;
using cuda::DeviceStatus;
using cuda::Lanes;
using cuda::SignalPad;
using core::DType;
using core::ReduceOp;

constexpr CudaAlgorithm kAlgorithms[] = {CudaAlgorithm::kOneShot, CudaAlgorithm::kTwoShot, CudaAlgorithm::kRing};
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
  std::vector<std::unique_ptr<Line[]>> buffers;
  std::unique_ptr<SignalPad[]> pads;
  std::vector<DeviceStatus> status;
  cuda::PeerMemory peers{};
};

template <class T, class R>
bool run_body(CudaAlgorithm algorithm, const CudaAllReduceArgs& a, const Lanes& l) {
  switch (algorithm) {
    case CudaAlgorithm::kOneShot: return cuda::one_shot_all_reduce<T, R, cuda::HostBlockSync>(a, l);
    case CudaAlgorithm::kTwoShot: return cuda::two_shot_all_reduce<T, R, cuda::HostBlockSync>(a, l);
    case CudaAlgorithm::kRing: return cuda::ring_all_reduce<T, R, cuda::HostBlockSync>(a, l);
  }
  return false;
}

// Block `l.block` of a rank's launch, as the GPU would run it.
bool run_block(const CudaAllReduceArgs& a, const Lanes& l) {
  bool ok = false;
  const bool known = cuda::dispatch_reduction(a.dtype, a.op, [&](auto type, auto reduction) {
    ok = run_body<decltype(type), decltype(reduction)>(a.algorithm, a, l);
  });
  return known && ok;
}

// Small integers: sums, maxima and minima are exact in every type, products
// (of values in {-1, 1, 2}, or {1, 2, 3} unsigned) exact or wrapping.
int test_value(DType t, ReduceOp op, int rank, int iteration, size_t i) {
  const size_t mix = i * 7 + size_t(rank) * 13 + size_t(iteration) * 5;
  const bool is_unsigned = t == DType::kUInt8;
  if (op == ReduceOp::kProduct) return is_unsigned ? int(mix % 3) + 1 : (mix % 3 == 0 ? -1 : int(mix % 3));
  return int(mix % 9) - (is_unsigned ? 0 : 4);
}

void store_value(DType t, void* p, size_t i, int v) {
  switch (t) {
    case DType::kFloat32: static_cast<float*>(p)[i] = float(v); break;
    case DType::kFloat64: static_cast<double*>(p)[i] = double(v); break;
    case DType::kFloat16: static_cast<core::Half*>(p)[i] = core::to_half(float(v)); break;
    case DType::kBFloat16: static_cast<core::BFloat16*>(p)[i] = core::to_bfloat16(float(v)); break;
    case DType::kInt8: static_cast<int8_t*>(p)[i] = int8_t(v); break;
    case DType::kUInt8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
    case DType::kInt32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case DType::kInt64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    default: break;  // not a dtype of these kernels (core::cuda_all_reduce_takes)
  }
}

struct Case {
  CudaAlgorithm algorithm;
  int world;
  int blocks;  // 0: the launcher's default (blocks_of), within sm_count's limit
  DType dtype;
  ReduceOp op;
  size_t count;
  size_t buffer_bytes = 2048;
  int iterations = 3;
  bool in_place = false;
  bool unaligned = false;  // tensors one element off 16-byte alignment: the scalar path
  // Launch i cycles through the algorithms, 1..blocks blocks and several
  // counts up to `count`, as a communicator's launches do. A rank's blocks
  // then meet between launches, as its stream orders them on a GPU: a launch
  // with another block count gives blocks other staging regions, which is safe
  // only because no peer reads a rank's staging once its launch has ended.
  bool mixed = false;
  int sm_count = 0;
};

struct Launch {
  CudaAlgorithm algorithm;
  int blocks;
  size_t count;
};

std::vector<Launch> launches_of(const Case& c) {
  std::vector<Launch> launches;
  for (int it = 0; it < c.iterations; ++it) {
    if (!c.mixed) {
      launches.push_back({c.algorithm, c.blocks, c.count});
    } else {
      const size_t counts[] = {c.count, 1, c.count / 2 + 3, 0, 7};
      launches.push_back({kAlgorithms[size_t(it) % 3], 1 + it % c.blocks, counts[size_t(it) % 5]});
    }
  }
  return launches;
}

void report(const Case& c, const char* what) {
  std::fprintf(stderr, "  %s: %s world=%d blocks=%d %s %s count=%zu buffer=%zu%s%s%s\n", what,
               cuda::cuda_algorithm_name(c.algorithm), c.world, c.blocks, core::dtype_name(c.dtype),
               core::op_name(c.op), c.count, c.buffer_bytes, c.in_place ? " in-place" : "",
               c.unaligned ? " unaligned" : "", c.mixed ? " mixed" : "");
}

// What the host may do once a launch has ended on a rank: reuse its staging
// buffer. Each block overwrites its own part when it returns, which races
// (under TSan) with any peer still reading it.
void scribble_own_staging(const CudaAllReduceArgs& a, int block) {
  unsigned char* buffer = static_cast<unsigned char*>(a.peers.buffers[a.rank]);
  const int blocks = cuda::blocks_of(a);
  if (a.algorithm == CudaAlgorithm::kRing) {
    const size_t slot = cuda::ring_layout(a.peers.buffer_bytes, blocks, core::dtype_size(a.dtype),
                                          core::accum_size(a.dtype)).slot_bytes;
    for (int s = 0; s < cuda::kRingSlots; ++s) std::memset(buffer + (size_t(s) * size_t(blocks) + size_t(block)) * slot, 0xff, slot);
  } else {
    const size_t region = cuda::block_region_bytes(a.peers.buffer_bytes, blocks);
    std::memset(buffer + size_t(block) * region, 0xff, region);
  }
}

// Runs the case's launches back to back on every (rank, block) thread and
// checks every rank's every result.
void run_case(const Case& c) {
  const std::vector<Launch> launches = launches_of(c);
  const size_t elem = core::dtype_size(c.dtype);
  const size_t offset = c.unaligned ? elem : 0;
  size_t most_count = 0;
  for (const Launch& l : launches) most_count = std::max(most_count, l.count);
  const size_t lines = (most_count * elem + offset) / sizeof(Line) + 1;
  HostRanks host(c.world, c.buffer_bytes);
  auto fresh = [&] { return std::unique_ptr<Line[]>(new Line[lines]()); };
  // [launch][rank]: the input as generated, the tensor passed in (the input
  // itself when in place) and what comes out.
  const size_t n = launches.size();
  std::vector<std::vector<std::unique_ptr<Line[]>>> pristine(n), input(n), output(n);
  auto at = [&](const std::unique_ptr<Line[]>& l) { return reinterpret_cast<unsigned char*>(l.get()) + offset; };
  for (size_t it = 0; it < n; ++it) {
    for (int r = 0; r < c.world; ++r) {
      pristine[it].push_back(fresh());
      for (size_t i = 0; i < launches[it].count; ++i)
        store_value(c.dtype, at(pristine[it].back()), i, test_value(c.dtype, c.op, r, int(it), i));
      input[it].push_back(fresh());
      std::memcpy(at(input[it].back()), at(pristine[it].back()), launches[it].count * elem);
      if (!c.in_place) output[it].push_back(fresh());
    }
  }
  auto out_of = [&](size_t it, int r) { return at((c.in_place ? input : output)[it][size_t(r)]); };

  CudaAllReduceArgs proto{};
  proto.world = c.world;
  proto.peers = host.peers;
  proto.dtype = c.dtype;
  proto.op = c.op;
  proto.timeout_ns = kPatientNs;
  proto.status = &host.status[0];
  proto.sm_count = c.sm_count;
  auto args_of = [&](CudaAllReduceArgs a, const Launch& l) {
    a.algorithm = l.algorithm;
    a.blocks = l.blocks;
    a.count = l.count;
    return a;
  };
  // The blocks each launch runs are the launcher's: blocks_of (a.blocks
  // itself unless it is 0), while epochs_used sees the arguments as given.
  int most_blocks = 0;
  for (const Launch& l : launches) {
    CudaAllReduceArgs a = args_of(proto, l);
    a.input = a.output = &host;
    CHECK(cuda::check_args(a) == nullptr);
    most_blocks = std::max(most_blocks, cuda::blocks_of(a));
  }

  std::vector<std::unique_ptr<std::barrier<>>> launch_ends;
  for (int r = 0; r < c.world; ++r) launch_ends.emplace_back(new std::barrier<>(most_blocks));
  std::atomic<int> failed_blocks{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < c.world; ++r) {
    for (int b = 0; b < most_blocks; ++b) {
      threads.emplace_back([&, r, b] {
        CudaAllReduceArgs a = proto;
        a.rank = r;
        a.status = &host.status[size_t(r)];
        for (size_t it = 0; it < n; ++it) {
          a = args_of(a, launches[it]);
          a.input = at(input[it][size_t(r)]);
          a.output = out_of(it, r);
          const int blocks = cuda::blocks_of(a);
          if (b < blocks && !run_block(a, Lanes{0, 1, b, blocks})) ++failed_blocks;
          if (c.mixed) launch_ends[size_t(r)]->arrive_and_wait();
          a.epoch_base += cuda::epochs_used(a);
        }
        if (b < cuda::blocks_of(a)) scribble_own_staging(a, b);
      });
    }
  }
  for (std::thread& t : threads) t.join();

  int wrong = failed_blocks.load();
  std::vector<unsigned char> expected(most_count * elem + 1);
  uint64_t final_base = 0;
  for (size_t it = 0; it < n; ++it) {
    const size_t bytes = launches[it].count * elem;
    std::vector<const void*> srcs;
    for (int r = 0; r < c.world; ++r) srcs.push_back(at(pristine[it][size_t(r)]));
    core::reduce_sources(c.dtype, c.op, expected.data(), srcs.data(), c.world, launches[it].count, c.world);
    for (int r = 0; r < c.world; ++r) {
      if (std::memcmp(out_of(it, r), expected.data(), bytes) != 0) ++wrong;
      if (std::memcmp(out_of(it, r), out_of(it, 0), bytes) != 0) ++wrong;
    }
    final_base += cuda::epochs_used(args_of(proto, launches[it]));
  }
  // epochs_used is what the kernels use: the largest flag written is the last base.
  uint64_t largest = 0;
  for (int r = 0; r < c.world; ++r) {
    const SignalPad& pad = host.pads[size_t(r)];
    for (int b = 0; b < cuda::kMaxBlocks; ++b) {
      for (int p = 0; p < cuda::kMaxRanks; ++p) {
        largest = std::max({largest, pad.barrier[b].from[p], pad.ring_ready[b].from[p], pad.ring_consumed[b].from[p]});
      }
    }
  }
  if (!c.mixed && largest != final_base) ++wrong;
  if (largest > final_base) ++wrong;
  for (const DeviceStatus& s : host.status) wrong += s.code != 0 ? 1 : 0;
  CHECK_EQ(wrong, 0);
  if (wrong != 0) report(c, "wrong");
}

TEST(layout_matches_core_ring_schedule) {
  for (size_t count : {0, 1, 7, 8, 31, 1023, 1000003}) {
    for (int parts = 1; parts <= 8; ++parts) {
      size_t next = 0;
      for (int p = 0; p < parts; ++p) {
        const core::Range want = core::chunk_range(count, parts, p);
        const cuda::ElemRange got = cuda::split_aligned(cuda::ElemRange{0, count}, parts, p, 1);
        CHECK_EQ(got.begin, want.begin);
        CHECK_EQ(got.end, want.end);
        // Aligned splits tile the range too, each part starting on a vector.
        const cuda::ElemRange v = cuda::split_aligned(cuda::ElemRange{0, count}, parts, p, 8);
        CHECK_EQ(v.begin, next);
        CHECK(v.begin % 8 == 0 || v.begin == count);
        next = v.end;
      }
      CHECK_EQ(next, count);
    }
  }
  for (int world = 2; world <= 8; ++world) {
    for (int r = 0; r < world; ++r) {
      for (int s = 0; s < world - 1; ++s) {
        CHECK_EQ(cuda::ring_rs_send_chunk(r, s, world), core::rs_send_chunk(r, s, world));
        CHECK_EQ(cuda::ring_rs_recv_chunk(r, s, world), core::rs_recv_chunk(r, s, world));
        CHECK_EQ(cuda::ring_ag_recv_chunk(r, s, world), core::ag_recv_chunk(r, s, world));
      }
      CHECK_EQ(core::owned_chunk(r, world), r);  // the ring's finish step reduces chunk `rank`
    }
  }
}

TEST(two_shot_layout_fits_the_buffer) {
  for (size_t bytes : {16, 64, 100, 2048, 1 << 20}) {
    for (int world = 2; world <= 8; ++world) {
      for (DType t : kDTypes) {
        const size_t elem = core::dtype_size(t);
        const cuda::TwoShotLayout l = cuda::two_shot_layout(bytes, elem, world);
        const size_t largest_chunk = cuda::split_aligned(cuda::ElemRange{0, l.piece_elems}, world, 0, 16 / elem).size();
        CHECK((l.result_offset + largest_chunk) * elem <= bytes);
      }
    }
  }
}

// for_each_pack counts in 32 bits: no region or slot, however large the
// staging buffer, holds more than kMaxLoopElems elements.
TEST(regions_and_slots_fit_32_bit_loops) {
  for (size_t bytes : {size_t(2048), size_t(1) << 30, size_t(3) << 30, size_t(64) << 30}) {
    for (int blocks : {1, 2, 64}) {
      const size_t region = cuda::block_region_bytes(bytes, blocks);
      CHECK(region <= cuda::kMaxLoopElems && region % cuda::kVectorBytes == 0);
      CHECK(region * size_t(blocks) <= bytes);
      const cuda::RingLayout ring = cuda::ring_layout(bytes, blocks, 1, 1);
      CHECK(ring.slot_bytes <= cuda::kMaxLoopElems && ring.sub_elems <= cuda::kMaxLoopElems);
      CHECK(ring.slot_bytes * size_t(cuda::kRingSlots) * size_t(blocks) <= bytes);
    }
  }
  CHECK_EQ(cuda::block_region_bytes(size_t(64) << 30, 1), cuda::kMaxLoopElems);
  CHECK_EQ(cuda::block_region_bytes(size_t(1) << 20, 4), size_t(1) << 18);  // below the cap: unchanged
}

TEST(check_args_rejects) {
  HostRanks host(2, 1024);
  CudaAllReduceArgs a{};
  a.world = 2;
  a.peers = host.peers;
  a.input = a.output = &host;
  a.count = 10;
  a.dtype = DType::kInt32;
  a.op = ReduceOp::kSum;
  a.algorithm = CudaAlgorithm::kRing;
  a.timeout_ns = 1;
  a.status = &host.status[0];
  a.blocks = 4;
  CHECK(cuda::check_args(a) == nullptr);
  a.op = ReduceOp::kAvg;
  CHECK(cuda::check_args(a) != nullptr);  // avg of integers
  a.op = ReduceOp::kSum;
  a.blocks = 65;
  CHECK(cuda::check_args(a) != nullptr);
  a.blocks = 64;  // 1024 bytes cut into 4 slots x 64 blocks: no room for a vector
  CHECK(cuda::check_args(a) != nullptr);
  a.blocks = 4;
  a.peers.buffers[1] = static_cast<char*>(a.peers.buffers[1]) + 4;
  CHECK(cuda::check_args(a) != nullptr);
}

// All ranks' blocks must fit on the GPU at once: the sum over ranks stays
// within the SM count (an H200 has 132), at least one block a rank, kMaxBlocks
// at most; unknown (0) leaves only kMaxBlocks.
TEST(max_blocks_per_rank_keeps_ranks_resident) {
  CHECK_EQ(cuda::max_blocks_per_rank(2, 132), 64);
  CHECK_EQ(cuda::max_blocks_per_rank(3, 132), 44);
  CHECK_EQ(cuda::max_blocks_per_rank(8, 132), 16);
  CHECK_EQ(cuda::max_blocks_per_rank(8, 4), 1);
  for (int world = 1; world <= cuda::kMaxRanks; ++world) {
    CHECK_EQ(cuda::max_blocks_per_rank(world, 0), cuda::kMaxBlocks);
    for (int sms : {1, 7, 8, 46, 108, 132, 144, 1000}) {
      const int most = cuda::max_blocks_per_rank(world, sms);
      CHECK(most >= 1 && most <= cuda::kMaxBlocks);
      if (sms >= world) CHECK(most * world <= sms);
      // The largest such count: one more block a rank would overfill the SMs.
      if (most < cuda::kMaxBlocks && sms >= world) CHECK((most + 1) * world > sms);
    }
  }
}

// The default block count keeps within the limit, an explicit one beyond it is
// rejected, and epochs_used counts the blocks the launch really runs.
TEST(blocks_of_respects_sm_count) {
  HostRanks host(8, size_t(1) << 20);
  CudaAllReduceArgs a{};
  a.world = 8;
  a.peers = host.peers;
  a.input = a.output = &host;
  a.count = size_t(16) << 20;  // 64 MiB of float: the size alone asks for 32 blocks
  a.dtype = DType::kFloat32;
  a.op = ReduceOp::kSum;
  a.timeout_ns = 1;
  a.status = &host.status[0];
  for (CudaAlgorithm alg : kAlgorithms) {
    a.algorithm = alg;
    a.blocks = 0;
    a.sm_count = 0;
    CHECK_EQ(cuda::blocks_of(a), 32);
    a.sm_count = 132;
    CHECK_EQ(cuda::blocks_of(a), 16);
    CHECK(cuda::check_args(a) == nullptr);
    CudaAllReduceArgs explicit_blocks = a;
    explicit_blocks.blocks = 16;
    CHECK_EQ(cuda::epochs_used(a), cuda::epochs_used(explicit_blocks));
    CHECK(cuda::check_args(explicit_blocks) == nullptr);
    explicit_blocks.blocks = 17;  // 8 x 17 > 132: rejected, not clamped
    CHECK(cuda::check_args(explicit_blocks) != nullptr);
    CHECK_EQ(cuda::blocks_of(explicit_blocks), 17);
    explicit_blocks.sm_count = 0;  // unknown: up to kMaxBlocks, as before
    CHECK(cuda::check_args(explicit_blocks) == nullptr);
    a.sm_count = -1;
    CHECK(cuda::check_args(a) != nullptr);
  }
  a.sm_count = 132;
  a.count = 1000;  // small: one block, whatever the limit
  CHECK_EQ(cuda::blocks_of(a), 1);
}

// Launches with the default block count under a tight SM limit: the blocks
// the bodies run, the epochs the host counts and the flags written agree.
TEST(all_reduce_default_blocks_within_sm_count) {
  for (CudaAlgorithm alg : kAlgorithms) {
    // 300 KB of float asks for 5 blocks; 2 ranks on 6 SMs get 3 each.
    Case c{alg, 2, 0, DType::kFloat32, ReduceOp::kSum, 75000};
    c.sm_count = 6;
    c.buffer_bytes = size_t(1) << 16;
    c.iterations = 2;
    run_case(c);
  }
}

// Every algorithm x world 1..4 x block counts x the count grid (0, 1, 7, 1023,
// larger than the staging buffer), in and out of place, aligned or not.
TEST(all_reduce_counts_worlds_blocks) {
  for (CudaAlgorithm alg : kAlgorithms) {
    for (int world = 1; world <= 4; ++world) {
      for (int blocks : {1, 3}) {
        for (size_t count : {0, 1, 7, 1023, 2053}) {
          for (DType t : {DType::kFloat32, DType::kBFloat16}) {
            Case c{alg, world, blocks, t, t == DType::kFloat32 ? ReduceOp::kSum : ReduceOp::kAvg, count};
            c.in_place = (count + size_t(blocks)) % 2 == 0;
            c.unaligned = count == 1023 && t == DType::kBFloat16;
            run_case(c);
          }
        }
      }
    }
  }
}

// Every dtype x op, on every algorithm.
TEST(all_reduce_dtypes_ops) {
  for (CudaAlgorithm alg : kAlgorithms) {
    for (DType t : kDTypes) {
      for (ReduceOp op : kOps) {
        if (op == ReduceOp::kAvg && !core::is_floating(t)) continue;
        run_case(Case{alg, 3, 2, t, op, 1029});
      }
    }
  }
}

// The routing table sends a CUDA all-reduce to these kernels only for the
// pairs they take (the others to the fallback): the table and the dispatch agree.
TEST(routing_table_states_what_the_kernels_take) {
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                          DType::kInt8,    DType::kUInt8,   DType::kInt32,   DType::kInt64,
                          DType::kBool,    DType::kInt16,   DType::kUInt16,  DType::kUInt32,
                          DType::kUInt64,  core::opaque_dtype(3, 1)};
  const ReduceOp ops[] = {ReduceOp::kSum,     ReduceOp::kAvg,  ReduceOp::kMax, ReduceOp::kMin,
                          ReduceOp::kProduct, ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor};
  for (DType d : dtypes) {
    for (ReduceOp op : ops) {
      CHECK_EQ(cuda::dispatch_reduction(d, op, [](auto, auto) {}), core::cuda_all_reduce_takes(d, op));
    }
  }
}

TEST(all_reduce_world_8) {
  for (CudaAlgorithm alg : kAlgorithms) run_case(Case{alg, 8, 2, DType::kFloat16, ReduceOp::kSum, 5003});
}

// A communicator's mix of launches on the same pads and buffers.
TEST(all_reduce_mixed_launches) {
  for (int world : {2, 3}) {
    Case c{CudaAlgorithm::kOneShot, world, 3, DType::kBFloat16, ReduceOp::kSum, 1500};
    c.iterations = 30;
    c.mixed = true;
    run_case(c);
  }
}

// Many launches back to back through small staging buffers: the pads' reuse.
TEST(all_reduce_back_to_back) {
  for (CudaAlgorithm alg : kAlgorithms) {
    Case c{alg, 4, 2, DType::kFloat32, ReduceOp::kSum, 301};
    c.buffer_bytes = 512;
    c.iterations = 40;
    run_case(c);
  }
}

// Ranks 0..world-1 but `absent` run `launches` launches with a short timeout;
// `absent` runs only `absent_launches` of them. Checks that every running
// block returns, that each rank's status names `absent`, and the time it took.
void run_absent_rank(CudaAlgorithm alg, int absent_launches) {
  const int world = 3, blocks = 2, absent = 2, launches = absent_launches + 2;
  constexpr uint64_t kTimeoutNs = 50'000'000;
  HostRanks host(world, 1024);
  std::vector<float> data(size_t(world) * 1000, 1.0f);
  std::atomic<int> failures{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    for (int b = 0; b < blocks; ++b) {
      threads.emplace_back([&, r, b] {
        CudaAllReduceArgs a{};
        a.rank = r;
        a.world = world;
        a.peers = host.peers;
        a.input = a.output = &data[size_t(r) * 1000];
        a.count = 1000;
        a.dtype = DType::kFloat32;
        a.op = ReduceOp::kMax;
        a.algorithm = alg;
        a.timeout_ns = kTimeoutNs;
        a.status = &host.status[size_t(r)];
        a.blocks = blocks;
        for (int it = 0; it < (r == absent ? absent_launches : launches); ++it) {
          if (!run_block(a, Lanes{0, 1, b, blocks})) {
            ++failures;
            return;  // as the kernel ends; the host launches no more
          }
          a.epoch_base += cuda::epochs_used(a);
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK_EQ(failures.load(), (world - 1) * blocks);
  CHECK(seconds < 5.0);  // one timeout each, however slow the sanitizer
  for (int r = 0; r < world; ++r) {
    const DeviceStatus& s = host.status[size_t(r)];
    if (r == absent) {
      CHECK_EQ(s.code, 0u);
      continue;
    }
    CHECK_EQ(s.code, uint32_t(cuda::DeviceError::kTimeout));
    CHECK_EQ(s.failed, 1u);
    CHECK_EQ(s.peer, absent);
    CHECK(s.block >= 0 && s.block < blocks);
    // The first barrier of the launch the absent rank missed.
    CudaAllReduceArgs a{};
    a.world = world;
    a.peers = host.peers;
    a.count = 1000;
    a.dtype = DType::kFloat32;
    a.algorithm = alg;
    a.blocks = blocks;
    CHECK_EQ(s.epoch, cuda::epochs_used(a) * uint64_t(absent_launches) + 1);
  }
}

TEST(absent_rank_is_named_by_every_rank) {
  for (CudaAlgorithm alg : kAlgorithms) {
    run_absent_rank(alg, 0);  // never arrives
    run_absent_rank(alg, 2);  // leaves after two launches
  }
}

// A block waiting with a long deadline leaves at once when another block of
// its rank has failed.
TEST(failed_flag_releases_waiting_blocks) {
  HostRanks host(2, 1024);
  host.status[0].failed = 1;
  const cuda::Waiter w{&host.status[0], 3'600'000'000'000, 0};
  const auto start = std::chrono::steady_clock::now();
  CHECK(!cuda::block_barrier(host.peers.pads, 0, 2, 0, 1, w));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_EQ(host.status[0].code, 0u);  // only the first failure is recorded
}

}  // namespace

TEST_MAIN
