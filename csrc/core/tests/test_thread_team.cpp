// A rank's thread team (kernels/thread_team.h): the shares it splits a piece
// into, its failures and its sleep, and that every collective gives the same
// bytes with a team of four threads as with one.
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "collective_world.h"

using namespace pycomm::core;

namespace {

// Every collective that reduces or moves data, on random inputs, run by a
// world whose ranks each copy and reduce with `team` threads; returns every
// rank's outputs, one after another.
std::vector<char> run_every_collective(int world, int team, DType dtype, ReduceOp op, Algorithm algo,
                                       size_t count) {
  Config c = small_buffers();
  c.data.slot_bytes = 4096;
  c.data.link_bytes = 2048;
  c.tuning.team_threads = size_t(team);
  c.tuning.team_share_bytes = 64;  // the least: every piece splits as far as it can
  World w(world, c);
  const size_t esize = dtype_size(dtype);
  std::vector<std::vector<char>> ar(world), rs_in(world), rs_out(world, std::vector<char>(count * esize)),
      ag_out(world, std::vector<char>(count * esize * size_t(world))), bc(world), red(world);
  for (int r = 0; r < world; ++r) {
    ar[r] = red[r] = bc[r] = random_values(dtype, count, r, 1);
    rs_in[r] = random_values(dtype, count * size_t(world), r, 2);
  }
  auto errors = w.run([&](int r) {
    const Context ctx = w.ctx(r);
    all_reduce(ctx, AllReduceArgs{.data = ar[r].data(), .count = count, .dtype = dtype, .op = op, .algorithm = algo});
    reduce_scatter(ctx, ReduceScatterArgs{.input = rs_in[r].data(), .output = rs_out[r].data(), .count = count,
                                          .dtype = dtype, .op = op, .algorithm = algo});
    all_gather(ctx, AllGatherArgs{.input = rs_in[r].data(), .output = ag_out[r].data(), .count = count,
                                  .dtype = dtype, .algorithm = algo});
    broadcast(ctx, BroadcastArgs{.data = bc[r].data(), .count = count, .dtype = dtype, .root = world - 1});
    reduce(ctx, ReduceArgs{.data = red[r].data(), .count = count, .dtype = dtype, .op = op, .root = 0});
  });
  for (const auto& e : errors) CHECK(e.empty());
  std::vector<char> all;
  for (int r = 0; r < world; ++r) {
    for (const auto* v : {&ar[r], &rs_out[r], &ag_out[r], &bc[r], &red[r]}) all.insert(all.end(), v->begin(), v->end());
  }
  return all;
}

}  // namespace

TEST(a_team_of_four_threads_gives_the_bytes_of_one_for_every_dtype_and_op) {
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
                          DType::kUInt8,   DType::kInt16,   DType::kUInt16,  DType::kInt32,    DType::kUInt32,
                          DType::kInt64,   DType::kUInt64,  DType::kBool};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg,  ReduceOp::kMax, ReduceOp::kMin,
                          ReduceOp::kProduct, ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor};
  int checked = 0;
  for (int world : {1, 2, 3}) {
    for (DType dtype : dtypes) {
      const bool floating = dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
                            dtype == DType::kBFloat16;
      for (ReduceOp op : ops) {
        if (is_bitwise(op) ? floating : (op == ReduceOp::kAvg && !floating)) continue;
        if (dtype == DType::kBool && !(is_bitwise(op) || op == ReduceOp::kMax || op == ReduceOp::kMin)) continue;
        for (Algorithm algo : {Algorithm::kDirect, Algorithm::kRing}) {
          // Pieces of every length: a count across many pieces, and one that
          // leaves a short last piece and an uneven last share.
          for (size_t count : {size_t(3001), size_t(257)}) {
            const auto one = run_every_collective(world, 1, dtype, op, algo, count);
            const auto four = run_every_collective(world, 4, dtype, op, algo, count);
            if (one != four) {
              std::fprintf(stderr, "  world %d dtype %s op %s algo %s count %zu: a team of 4 differs\n", world,
                           dtype_name(dtype), op_name(op), algorithm_name(algo), count);
            }
            CHECK(one == four);
            ++checked;
          }
        }
      }
    }
  }
  std::printf("  %d cases of (world, dtype, op, algorithm, count), 5 collectives each, compared\n", checked);
}

TEST(a_team_splits_a_piece_into_shares_that_cover_it_once) {
  ThreadTeam team(4, 64, 5.0);
  for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(1000), size_t(4096),
                   size_t(100003)}) {
    for (int round = 0; round < 50; ++round) {
      std::vector<std::atomic<int>> hits(n);
      std::mutex mu;
      std::vector<std::pair<std::thread::id, size_t>> shares;
      team.split(n, 4, [&](size_t first, size_t count) {
        for (size_t i = first; i < first + count; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(mu);
        shares.emplace_back(std::this_thread::get_id(), first);
      });
      for (size_t i = 0; i < n; ++i) CHECK_EQ(hits[i].load(), 1);
      // A piece of 4 shares' worth runs on 4 threads, each share starting on a
      // 64-byte line (16 elements of 4 bytes).
      std::set<std::thread::id> threads;
      for (const auto& [id, first] : shares) {
        threads.insert(id);
        CHECK_EQ(first % 16, size_t(0));
      }
      CHECK_EQ(threads.size(), size_t(team.shares_for(n * 4)));
    }
  }
  CHECK_EQ(team.shares_for(63), 1);
  CHECK_EQ(team.shares_for(128), 2);
  CHECK_EQ(team.shares_for(1 << 20), 4);
  CHECK_EQ(ThreadTeam(1, 64, 5.0).shares_for(1 << 20), 1);
}

TEST(a_body_that_throws_on_a_helper_reaches_the_caller_and_the_team_goes_on) {
  ThreadTeam team(3, 64, 5.0);
  const std::thread::id caller = std::this_thread::get_id();
  for (int round = 0; round < 20; ++round) {
    bool thrown = false;
    try {
      team.split(3000, 1, [&](size_t, size_t) {
        if (std::this_thread::get_id() != caller) throw InvalidArgument("a helper's share refused");
      });
    } catch (const InvalidArgument& e) {
      thrown = std::string(e.what()) == "a helper's share refused";
    }
    CHECK(thrown);
  }
  std::atomic<int> helpers{0};
  team.split(3000, 1, [&](size_t, size_t) { helpers += std::this_thread::get_id() != caller; });
  CHECK_EQ(helpers.load(), 2);  // still split: the team was released each time
}

TEST(a_team_is_destroyed_at_once_even_just_after_a_piece) {
  // Its helpers may be between their last look and their sleep: the stop must
  // wake them (a lost wake-up would hold the join for the futex's 1 s bound).
  for (int round = 0; round < 200; ++round) {
    auto team = std::make_unique<ThreadTeam>(3, 64, 0.0);
    team->split(3000, 1, [](size_t, size_t) {});
    const auto start = std::chrono::steady_clock::now();
    team.reset();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500));
  }
}

TEST(a_team_sleeps_between_pieces_and_wakes_for_the_next) {
  // A spin of 0: every helper sleeps on its futex before each piece.
  ThreadTeam team(3, 64, 0.0);
  std::vector<int> v(3000);
  for (int round = 0; round < 200; ++round) {
    team.split(v.size(), sizeof(int), [&](size_t first, size_t count) {
      for (size_t i = first; i < first + count; ++i) v[i] += 1;
    });
    if (round % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int x : v) CHECK_EQ(x, 200);
}

TEST_MAIN
