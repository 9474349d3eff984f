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
#include "host_ranks.h"

namespace {

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
  Algorithm algorithm;
  int world;
  int blocks;  // 0: the launcher's default (blocks_of), within sm_count's limit
  DType dtype;
  ReduceOp op;
  size_t count;
  size_t buffer_bytes = 2048;
  int iterations = 3;
  bool in_place = false;
  // Tensors off 16-byte alignment by whole elements: rank r's input starts
  // (in_shift + r * rank_shift) % V elements past a 16-byte boundary, its
  // output (out_shift + r * rank_shift) % V (V: elements a vector), so ranks
  // may differ. In place uses the input's.
  int in_shift = 0;
  int out_shift = 0;
  int rank_shift = 0;
  // Launch i cycles through the algorithms, 1..blocks blocks and several
  // counts up to `count`, as a communicator's launches do. A rank's blocks
  // then meet between launches, as its stream orders them on a GPU: a launch
  // with another block count gives blocks other staging regions, which is safe
  // only because no peer reads a rank's staging once its launch has ended.
  bool mixed = false;
  int sm_count = 0;
};

struct Launch {
  Algorithm algorithm;
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
  std::fprintf(stderr, "  %s: %s world=%d blocks=%d %s %s count=%zu buffer=%zu%s shifts=%d,%d,%d%s\n", what,
               core::algorithm_name(c.algorithm), c.world, c.blocks, core::dtype_name(c.dtype),
               core::op_name(c.op), c.count, c.buffer_bytes, c.in_place ? " in-place" : "", c.in_shift,
               c.out_shift, c.rank_shift, c.mixed ? " mixed" : "");
}

// What the host may do once a launch has ended on a rank: reuse its staging
// buffer. Each block overwrites its own part when it returns, which races
// (under TSan) with any peer still reading it.
void scribble_own_staging(const CudaAllReduceArgs& a, int block) {
  unsigned char* buffer = static_cast<unsigned char*>(a.peers.buffers[a.rank]);
  const int blocks = cuda::blocks_of(a);
  if (a.algorithm == Algorithm::kRing) {
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
  const size_t vector = cuda::vector_elems(elem);
  auto shift_bytes = [&](int base, int r) { return size_t(base + r * c.rank_shift) % vector * elem; };
  size_t most_count = 0;
  for (const Launch& l : launches) most_count = std::max(most_count, l.count);
  const size_t lines = (most_count * elem + cuda::kVectorBytes) / sizeof(Line) + 1;
  HostRanks host(c.world, c.buffer_bytes);
  auto fresh = [&] { return std::unique_ptr<Line[]>(new Line[lines]()); };
  // [launch][rank]: the input as generated, the tensor passed in (the input
  // itself when in place) and what comes out.
  const size_t n = launches.size();
  std::vector<std::vector<std::unique_ptr<Line[]>>> pristine(n), input(n), output(n);
  auto at = [](const std::unique_ptr<Line[]>& l, size_t offset) {
    return reinterpret_cast<unsigned char*>(l.get()) + offset;
  };
  for (size_t it = 0; it < n; ++it) {
    for (int r = 0; r < c.world; ++r) {
      pristine[it].push_back(fresh());
      for (size_t i = 0; i < launches[it].count; ++i)
        store_value(c.dtype, at(pristine[it].back(), 0), i, test_value(c.dtype, c.op, r, int(it), i));
      input[it].push_back(fresh());
      std::memcpy(at(input[it].back(), shift_bytes(c.in_shift, r)), at(pristine[it].back(), 0),
                  launches[it].count * elem);
      if (!c.in_place) output[it].push_back(fresh());
    }
  }
  auto in_of = [&](size_t it, int r) { return at(input[it][size_t(r)], shift_bytes(c.in_shift, r)); };
  auto out_of = [&](size_t it, int r) {
    return c.in_place ? in_of(it, r) : at(output[it][size_t(r)], shift_bytes(c.out_shift, r));
  };

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
          a.input = in_of(it, r);
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
    for (int r = 0; r < c.world; ++r) srcs.push_back(at(pristine[it][size_t(r)], 0));
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
  for (const DeviceStatus& s : host.status) wrong += s.code != 0 || s.failed != 0 ? 1 : 0;
  for (int r = 0; r < c.world; ++r) wrong += host.pads[size_t(r)].timeout_claim != 0 ? 1 : 0;
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
  a.algorithm = Algorithm::kRing;
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
  int32_t data[8] = {};
  a.input = a.output = &data[1];  // off 16 bytes: served
  CHECK(cuda::check_args(a) == nullptr);
  a.output = reinterpret_cast<char*>(&data[1]) + 1;  // off its element size: a GPU would fault
  CHECK(cuda::check_args(a) != nullptr);
  a.input = a.output = &host;
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
  for (Algorithm alg : kAlgorithms) {
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
  for (Algorithm alg : kAlgorithms) {
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
  for (Algorithm alg : kAlgorithms) {
    for (int world = 1; world <= 4; ++world) {
      for (int blocks : {1, 3}) {
        for (size_t count : {0, 1, 7, 1023, 2053}) {
          for (DType t : {DType::kFloat32, DType::kBFloat16}) {
            Case c{alg, world, blocks, t, t == DType::kFloat32 ? ReduceOp::kSum : ReduceOp::kAvg, count};
            c.in_place = (count + size_t(blocks)) % 2 == 0;
            if (count == 1023 && t == DType::kBFloat16) c.in_shift = c.out_shift = 1;
            run_case(c);
          }
        }
      }
    }
  }
}

// Every dtype x op, on every algorithm.
TEST(all_reduce_dtypes_ops) {
  for (Algorithm alg : kAlgorithms) {
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
  for (Algorithm alg : kAlgorithms) run_case(Case{alg, 8, 2, DType::kFloat16, ReduceOp::kSum, 5003});
}

// A communicator's mix of launches on the same pads and buffers.
TEST(all_reduce_mixed_launches) {
  for (int world : {2, 3}) {
    Case c{Algorithm::kDirect, world, 3, DType::kBFloat16, ReduceOp::kSum, 1500};
    c.iterations = 30;
    c.mixed = true;
    run_case(c);
  }
}

// Many launches back to back through small staging buffers: the pads' reuse.
TEST(all_reduce_back_to_back) {
  for (Algorithm alg : kAlgorithms) {
    Case c{alg, 4, 2, DType::kFloat32, ReduceOp::kSum, 301};
    c.buffer_bytes = 512;
    c.iterations = 40;
    run_case(c);
  }
}
// The element loops' shape (all_reduce_elements.h): on the vector path,
// vectors from element 0 (so at 16-byte boundaries of every pointer aligned
// there), as many as fit; every element once either way; and copy_alone's
// head, after which input and output are both aligned when they share a
// shift. (run_case then runs every body with misaligned tensors: a whole
// vector off 16 bytes there stops the test, check_pack_aligned.)
template <class T>
void check_vector_paths() {
  constexpr int V = cuda::kVectorWidth<T>;
  alignas(64) static unsigned char memory[3][512];
  for (int s0 = 0; s0 < V; ++s0) {
    for (int s1 : {0, s0, (s0 + 1) % V}) {
      for (int s2 : {-1, 0, s0}) {  // -1: no third pointer
        T* p0 = reinterpret_cast<T*>(memory[0] + size_t(s0) * sizeof(T));
        T* p1 = reinterpret_cast<T*>(memory[1] + size_t(s1) * sizeof(T));
        T* p2 = s2 < 0 ? nullptr : reinterpret_cast<T*>(memory[2] + size_t(s2) * sizeof(T));
        const bool vector = cuda::is_vector_aligned(p0) && cuda::is_vector_aligned(p1) &&
                            (p2 == nullptr || cuda::is_vector_aligned(p2));
        CHECK_EQ(vector, s0 == 0 && s1 == 0 && s2 <= 0);
        for (size_t n : {size_t(0), size_t(1), size_t(V - 1), size_t(V), size_t(3 * V + 1), size_t(40)}) {
          std::vector<int> seen(n, 0);
          size_t vector_elems = 0;
          for (unsigned t = 0; t < 3; ++t) {  // three threads of a block, one after the other
            cuda::for_each_pack<V>(Lanes{t, 3, 0, 1}, n, vector, [&](auto w, size_t i) {
              constexpr int W = decltype(w)::value;
              for (int k = 0; k < W; ++k) ++seen[i + size_t(k)];
              if (W == 1) return;
              vector_elems += W;
              CHECK(cuda::is_vector_aligned(p0 + i) && cuda::is_vector_aligned(p1 + i));
              if (p2 != nullptr) CHECK(cuda::is_vector_aligned(p2 + i));
            });
          }
          CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
          CHECK_EQ(vector_elems, vector ? n / V * V : 0);
          const size_t head = cuda::common_head(p0, p1, n);
          CHECK_EQ(head, s0 == s1 ? std::min(n, size_t((V - s0) % V)) : size_t(0));
          if (s0 == s1 && head < n) CHECK(cuda::is_vector_aligned(p0 + head) && cuda::is_vector_aligned(p1 + head));
        }
      }
    }
  }
}

TEST(element_loops_and_copy_alone_head) {
  check_vector_paths<int8_t>();
  check_vector_paths<core::BFloat16>();
  check_vector_paths<float>();
  check_vector_paths<double>();
}

// Tensors off 16-byte alignment, the same on every rank or not, input and
// output alike or not: each loop takes the vector path when its own pointers
// allow (a misaligned output leaves the input's loops vectorised, and with
// one rank a head brings input and output into step), and the result is the
// same bits on every rank.
TEST(all_reduce_misaligned_tensors) {
  struct Shifts {
    bool in_place;
    int in, out, rank;
  };
  // In place, alike on every rank; in place, rank r shifted by r; out of
  // place, input aligned and output not; input and output shifted alike (one
  // rank: copy_alone peels a head), and not alike.
  const Shifts shifts[] = {{true, 3, 3, 0}, {true, 0, 0, 1}, {false, 0, 1, 0}, {false, 3, 3, 1}, {false, 2, 3, 1}};
  for (Algorithm alg : kAlgorithms) {
    for (int world : {1, 2, 3}) {
      for (DType t : {DType::kInt8, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
        for (const Shifts& sh : shifts) {
          Case c{alg, world, 2, t, ReduceOp::kSum, 1029};
          c.in_place = sh.in_place;
          c.in_shift = sh.in;
          c.out_shift = sh.out;
          c.rank_shift = sh.rank;
          c.iterations = 2;
          run_case(c);
        }
      }
    }
  }
}

}  // namespace

TEST_MAIN
