// The all-reduce's algorithms against the reference: direct, ring, two_shot
// in symmetric memory and two_level across NUMA domain layouts, with ranks
// run as threads that share one mapping.
#include "collective_world.h"

using namespace pycomm::core;

TEST(all_reduce_matches_reference_for_every_world_dtype_op) {
  for (int world = 1; world <= 4; ++world) {
    World w(world, small_buffers());
    for (Algorithm algo : {Algorithm::kDirect, Algorithm::kRing}) {
      for (size_t count : {0ul, 1ul, 7ul, 250ul, 1023ul}) {
        for (ReduceOp op : kOps) {
          check_all_reduce<float>(w, DType::kFloat32, op, count, algo);
          check_all_reduce<double>(w, DType::kFloat64, op, count, algo);
          check_all_reduce<Half>(w, DType::kFloat16, op, count, algo);
          check_all_reduce<BFloat16>(w, DType::kBFloat16, op, count, algo);
          if (op != ReduceOp::kAvg) {
            check_all_reduce<int8_t>(w, DType::kInt8, op, count, algo);
            check_all_reduce<uint8_t>(w, DType::kUInt8, op, count, algo);
            check_all_reduce<int32_t>(w, DType::kInt32, op, count, algo);
            check_all_reduce<int64_t>(w, DType::kInt64, op, count, algo);
            check_all_reduce<int16_t>(w, DType::kInt16, op, count, algo);
            // Unsigned: no product, whose wrapped negative inputs the double
            // reference cannot hold (test_vector_kernels.cpp covers it).
            if (op != ReduceOp::kProduct) {
              check_all_reduce<uint16_t>(w, DType::kUInt16, op, count, algo);
              check_all_reduce<uint32_t>(w, DType::kUInt32, op, count, algo);
            }
          }
        }
      }
    }
  }
}

TEST(two_shot_in_symmetric_memory_matches_reference) {
  // Counts across the 16 KiB pieces of float32 (4096 elements) and shares of
  // unequal length (count not a multiple of the world).
  for (int world = 1; world <= 4; ++world) {
    World w(world, small_buffers());
    for (size_t count : {0ul, 1ul, 7ul, 1023ul, 4096ul * 3 + 5}) {
      for (ReduceOp op : kOps) {
        check_all_reduce<float>(w, DType::kFloat32, op, count, Algorithm::kTwoShot);
        check_all_reduce<BFloat16>(w, DType::kBFloat16, op, count, Algorithm::kTwoShot);
        if (op != ReduceOp::kAvg) check_all_reduce<int32_t>(w, DType::kInt32, op, count, Algorithm::kTwoShot);
      }
    }
  }
}

// NUMA domain layouts of 2 to 5 ranks: halves, interleaved, uneven, three.
const std::vector<std::vector<int>> kDomainLayouts = {
    {0, 1}, {0, 0, 1}, {0, 1, 1}, {0, 1, 0}, {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 0, 0, 1}, {0, 1, 2}, {0, 0, 1, 1, 2}};

TEST(two_level_all_reduce_matches_reference_for_every_domain_layout) {
  // 64 float32 elements a piece: counts of many pieces, a short last piece,
  // and fewer elements than a domain has ranks (empty shares).
  for (const auto& layout : kDomainLayouts) {
    World w(int(layout.size()), small_buffers());
    for (size_t count : {0ul, 1ul, 3ul, 250ul, 1023ul}) {
      for (ReduceOp op : kOps) {
        check_all_reduce<float>(w, DType::kFloat32, op, count, Algorithm::kTwoLevel, &layout);
        check_all_reduce<double>(w, DType::kFloat64, op, count, Algorithm::kTwoLevel, &layout);
        check_all_reduce<Half>(w, DType::kFloat16, op, count, Algorithm::kTwoLevel, &layout);
        check_all_reduce<BFloat16>(w, DType::kBFloat16, op, count, Algorithm::kTwoLevel, &layout);
        if (op != ReduceOp::kAvg) {
          check_all_reduce<int8_t>(w, DType::kInt8, op, count, Algorithm::kTwoLevel, &layout);
          check_all_reduce<int64_t>(w, DType::kInt64, op, count, Algorithm::kTwoLevel, &layout);
        }
      }
    }
  }
  // No layout: one domain, the reduce-scatter and all-gather through the slots.
  for (int world = 1; world <= 4; ++world) {
    World w(world, small_buffers());
    for (size_t count : {1ul, 7ul, 1023ul}) {
      for (ReduceOp op : kOps) check_all_reduce<float>(w, DType::kFloat32, op, count, Algorithm::kTwoLevel);
    }
  }
}

// The two-level all-reduce of random values with `team` threads a rank;
// checks every rank ends with the same bytes and returns rank 0's.
std::vector<char> two_level_result(const std::vector<int>& layout, int team, DType dtype, ReduceOp op,
                                   size_t count) {
  const int world = int(layout.size());
  Config c = small_buffers();
  c.data.slot_bytes = 4096;
  c.tuning.team_threads = size_t(team);
  c.tuning.team_share_bytes = 64;
  World w(world, c);
  std::vector<std::vector<char>> data(world);
  for (int r = 0; r < world; ++r) data[r] = random_values(dtype, count, r, 3);
  auto errors = w.run([&](int r) {
    AllReduceArgs a{.data = data[r].data(), .count = count, .dtype = dtype, .op = op,
                    .algorithm = Algorithm::kTwoLevel};
    a.domain_of = layout.data();
    all_reduce(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 1; r < world; ++r) CHECK(data[r] == data[0]);
  return data[0];
}

TEST(two_level_is_bitwise_equal_across_ranks_and_team_sizes) {
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                          DType::kUInt64, DType::kBool};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kProduct, ReduceOp::kBxor};
  int checked = 0;
  for (const std::vector<int>& layout : {std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1, 1}}) {
    for (DType dtype : dtypes) {
      const bool floating = dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
                            dtype == DType::kBFloat16;
      for (ReduceOp op : ops) {
        if (is_bitwise(op) ? floating : (op == ReduceOp::kAvg && !floating)) continue;
        if (dtype == DType::kBool && !(is_bitwise(op) || op == ReduceOp::kMax)) continue;
        // Many pieces with a short last one; uneven shares.
        const size_t count = 3001;
        CHECK(two_level_result(layout, 1, dtype, op, count) == two_level_result(layout, 4, dtype, op, count));
        ++checked;
      }
    }
  }
  std::printf("  %d cases of (layout, dtype, op): a team of 4 gives the bytes of 1\n", checked);
}

TEST_MAIN
