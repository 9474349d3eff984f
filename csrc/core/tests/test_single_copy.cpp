// The single-copy collectives (collectives/single_copy.h) and their probe
// (transport/cross_memory.h), with ranks run as threads of this process:
// process_vm_readv reads this process's own memory as it would a peer's, so
// every path runs here, under the sanitizers too (which do not see the
// kernel's copies: the data they move is checked against references instead).
#include <random>

#include "collective_world.h"

using namespace pycomm::core;

namespace {

Config single_copy_on() {
  Config c = small_buffers();
  c.single_copy = SingleCopy::kAuto;
  c.tuning.single_copy_min_bytes = 1;
  return c;
}

template <class T>
void check_broadcast_gather_scatter(World& w, DType dtype, size_t count, int root) {
  const int world = w.size();
  std::vector<std::vector<T>> data(world, std::vector<T>(count));
  for (int r = 0; r < world; ++r) fill(data[r], r, ReduceOp::kSum);
  const auto original = data;
  auto errors = w.run([&](int r) {
    broadcast(w.ctx(r), BroadcastArgs{.data = data[r].data(), .count = count, .dtype = dtype, .root = root,
                                      .algorithm = Algorithm::kSingleCopy});
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) CHECK(same_bytes(data[r], original[root]));

  // Gather into one buffer per rank, then scatter them back from there.
  std::vector<std::vector<T>> parts(world, std::vector<T>(count, T(0)));
  errors = w.run([&](int r) {
    std::vector<void*> where;
    for (int q = 0; q < world; ++q) where.push_back(parts[q].data());
    gather(w.ctx(r), GatherArgs{.input = original[r].data(), .outputs = r == root ? where.data() : nullptr,
                                .count = count, .dtype = dtype, .root = root, .algorithm = Algorithm::kSingleCopy});
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int q = 0; q < world; ++q) CHECK(same_bytes(parts[q], original[q]));
  std::vector<std::vector<T>> back(world, std::vector<T>(count, T(0)));
  errors = w.run([&](int r) {
    std::vector<const void*> from;
    for (int q = 0; q < world; ++q) from.push_back(parts[q].data());
    scatter(w.ctx(r), ScatterArgs{.inputs = r == root ? from.data() : nullptr, .output = back[r].data(),
                                  .count = count, .dtype = dtype, .root = root, .algorithm = Algorithm::kSingleCopy});
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) CHECK(same_bytes(back[r], original[r]));
}


}  // namespace

TEST(threads_of_one_process_take_the_single_copy_and_off_keeps_staging) {
  if (!single_copy_here()) return;
  World on(3, single_copy_on());
  for (int r = 0; r < 3; ++r) CHECK(on.ranks[size_t(r)]->cma->enabled());
  World off(3, small_buffers());
  for (int r = 0; r < 3; ++r) {
    CHECK(!off.ranks[size_t(r)]->cma->enabled());
    CHECK(off.ranks[size_t(r)]->cma->reason().find("rank 0 has PYCOMM_SINGLE_COPY=off") != std::string::npos);
  }
}

TEST(one_rank_off_turns_it_off_for_all_and_cma_then_fails_on_every_rank) {
  if (!single_copy_here()) return;
  // Ranks agree on a setting they did not share: off anywhere means off for all.
  Config c = single_copy_on();
  for (SingleCopy others : {SingleCopy::kAuto, SingleCopy::kCma}) {
    const int n = 3;
    std::vector<std::unique_ptr<Session>> sessions =
        joined_sessions(n, SegmentPlace::named(new_segment_name()), c.wait, ShmDataPath::region(n, c.data));
    std::vector<std::unique_ptr<CrossMemory>> cma;
    for (auto& s : sessions) {
      s->start();
      cma.push_back(std::make_unique<CrossMemory>(*s));
    }
    const auto errors = run_on_threads(n, [&](int r) { cma[size_t(r)]->agree(r == 1 ? SingleCopy::kOff : others); });
    for (int r = 0; r < n; ++r) {
      CHECK(!cma[size_t(r)]->enabled());
      CHECK(cma[size_t(r)]->reason().find("rank 1 has PYCOMM_SINGLE_COPY=off") != std::string::npos);
      // cma anywhere, and it cannot be had: set-up fails on every rank, rank 1 included.
      const bool refused = others == SingleCopy::kCma;
      CHECK(errors[size_t(r)].empty() != refused);
      if (refused) CHECK(errors[size_t(r)].find("PYCOMM_SINGLE_COPY=cma on rank 0") != std::string::npos);
    }
  }
}

TEST(single_copy_collectives_match_references_for_every_world_dtype_op) {
  if (!single_copy_here()) return;
  for (int world = 1; world <= 4; ++world) {
    World w(world, single_copy_on());
    for (size_t count : {0ul, 1ul, 7ul, 250ul, 40000ul}) {
      for (ReduceOp op : kOps) {
        check_all_reduce<float>(w, DType::kFloat32, op, count, Algorithm::kSingleCopy);
        check_all_reduce<BFloat16>(w, DType::kBFloat16, op, count, Algorithm::kSingleCopy);
        check_all_reduce<Half>(w, DType::kFloat16, op, count, Algorithm::kSingleCopy);
        check_all_reduce<double>(w, DType::kFloat64, op, count, Algorithm::kSingleCopy);
        check_reduce_scatter<float>(w, DType::kFloat32, op, count, Algorithm::kSingleCopy);
        check_reduce_scatter<BFloat16>(w, DType::kBFloat16, op, count, Algorithm::kSingleCopy);
        if (op != ReduceOp::kAvg) {
          check_all_reduce<int32_t>(w, DType::kInt32, op, count, Algorithm::kSingleCopy);
          check_all_reduce<int8_t>(w, DType::kInt8, op, count, Algorithm::kSingleCopy);
          check_reduce_scatter<int64_t>(w, DType::kInt64, op, count, Algorithm::kSingleCopy);
        }
      }
      for (bool list : {false, true}) {
        check_all_gather<float>(w, DType::kFloat32, count, Algorithm::kSingleCopy, list);
        check_all_gather<int8_t>(w, DType::kInt8, count, Algorithm::kSingleCopy, list);
      }
      for (int root = 0; root < world; ++root) {
        check_broadcast_gather_scatter<float>(w, DType::kFloat32, count, root);
        check_broadcast_gather_scatter<int16_t>(w, DType::kBFloat16, count, root);  // 2-byte elements
      }
      check_all_to_all(w, count);
    }
  }
}

TEST(all_to_all_mixes_straight_blocks_and_linked_ones_by_what_each_sender_says) {
  if (!single_copy_here()) return;
  // Blocks of 1..4 x 600 int64s: with the threshold at 10 KiB, those of two
  // units and more go straight, the others through the links, in one call;
  // and a sender whose threshold differs (rank 2's) is followed by its peers.
  for (int world : {2, 3, 4}) {
    Config c = single_copy_on();
    c.tuning.single_copy_min_bytes = 10 << 10;
    World w(world, c);
    w.ranks.back()->tuning.single_copy_min_bytes = 1;
    check_all_to_all(w, 600);
  }
}

TEST(single_copy_is_bitwise_equal_across_ranks_and_team_sizes) {
  if (!single_copy_here()) return;
  // Random floats round differently in another order: each element is
  // reduced once, by its chunk's owner, in rank order, whatever the team.
  const size_t count = 70001;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    std::vector<std::vector<char>> result;
    for (int team : {1, 4}) {
      Config c = single_copy_on();
      c.tuning.team_threads = size_t(team);
      c.tuning.team_share_bytes = 64;
      World w(3, c);
      std::vector<std::vector<char>> data(3);
      std::mt19937_64 gen(7);
      for (int r = 0; r < 3; ++r) {
        data[r].resize(count * dtype_size(dtype));
        for (size_t i = 0; i < count; ++i) {
          const float x = std::ldexp(float(int64_t(gen() % 2001) - 1000) / 997.f, int(gen() % 9) - 4);
          char* at = data[r].data() + i * dtype_size(dtype);
          if (dtype == DType::kFloat32) std::memcpy(at, &x, 4);
          if (dtype == DType::kBFloat16) { const BFloat16 b = to_bfloat16(x); std::memcpy(at, &b, 2); }
          if (dtype == DType::kFloat16) { const Half h = to_half(x); std::memcpy(at, &h, 2); }
        }
      }
      auto errors = w.run([&](int r) {
        all_reduce(w.ctx(r), AllReduceArgs{.data = data[r].data(), .count = count, .dtype = dtype,
                                           .algorithm = Algorithm::kSingleCopy});
      });
      for (const auto& e : errors) CHECK(e.empty());
      CHECK(data[0] == data[1] && data[1] == data[2]);
      result.push_back(data[0]);
    }
    CHECK(result[0] == result[1]);
  }
}

TEST(a_peer_that_stalls_after_the_reads_is_timed_out_and_the_input_restored) {
  if (!single_copy_here()) return;
  // Rank 1 announces its tensor and enters the opening handshake, then never
  // comes to the middle one: rank 0 has reduced its chunk in place by then,
  // and must put it back when it times out.
  Config c = single_copy_on();
  c.wait.timeout_s = 0.3;
  World w(2, c);
  std::vector<std::vector<float>> data(2, std::vector<float>(30000));
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < data[r].size(); ++i) data[r][i] = float((i + size_t(r)) % 17);
  }
  const auto original = data;
  auto errors = w.run([&](int r) {
    AllReduceArgs a{.data = data[r].data(), .count = data[r].size(), .algorithm = Algorithm::kSingleCopy};
    if (r == 0) return all_reduce(w.ctx(0), a);
    Session& s1 = *w.ranks[1]->session;
    ShmDataPath& p1 = *w.ranks[1]->path;
    s1.begin("all_reduce");
    static_cast<uint64_t*>(p1.next_slot())[0] = reinterpret_cast<uint64_t>(a.data);
    static_cast<uint64_t*>(p1.next_slot())[1] = a.count * 4;
    s1.handshake(fingerprint_of(FingerprintKind::kAllReduce, a.count, a.dtype, Algorithm::kSingleCopy, &a.op, 2));
  });
  CHECK(errors[0].rfind("timeout: ", 0) == 0);
  CHECK(errors[0].find("Timed out") != std::string::npos);
  CHECK(same_bytes(data[0], original[0]));
}

TEST(an_announcement_that_does_not_fit_the_fingerprint_aborts_the_group) {
  if (!single_copy_here()) return;
  // A peer that names another size than the collective's is not read: every
  // rank fails, and the session stays aborted.
  World w(2, single_copy_on());
  std::vector<std::vector<float>> data(2, std::vector<float>(1000, 1.f));
  auto errors = w.run([&](int r) {
    const BroadcastArgs a{.data = data[r].data(), .count = 1000, .root = 1, .algorithm = Algorithm::kSingleCopy};
    if (r == 0) return broadcast(w.ctx(0), a);
    Session& s1 = *w.ranks[1]->session;
    ShmDataPath& p1 = *w.ranks[1]->path;
    s1.begin("broadcast");
    static_cast<uint64_t*>(p1.next_slot())[0] = reinterpret_cast<uint64_t>(a.data);
    static_cast<uint64_t*>(p1.next_slot())[1] = 1 << 20;  // more than it holds
    s1.handshake(fingerprint_of(FingerprintKind::kBroadcast, a.count, a.dtype, Algorithm::kSingleCopy, nullptr, 0, 1));
    s1.handshake(fingerprint_of(FingerprintKind::kBroadcast, a.count, a.dtype, Algorithm::kSingleCopy, nullptr, 0, 1));
  });
  CHECK(errors[0].find("rank 1 announced 1048576 bytes") != std::string::npos);
  CHECK(errors[1].find("aborted by rank 0") != std::string::npos);
  CHECK(w.ranks[0]->session->aborted());
}

TEST(a_read_of_a_range_the_peer_does_not_map_fails_and_aborts) {
  if (!single_copy_here()) return;
  World w(2, single_copy_on());
  std::vector<char> into(64);
  std::string error;
  try {
    w.ranks[0]->cma->read(1, into.data(), 16, into.size());  // page 0: never mapped
  } catch (const CommError& e) {
    error = e.what();
  }
  CHECK(error.find("reading 64 bytes of rank 1's memory failed after 0: Bad address") != std::string::npos);
  CHECK(w.ranks[1]->session->aborted());
}

TEST(single_copy_is_refused_by_name_where_the_group_cannot_read_its_peers) {
  World w(2, small_buffers());
  std::vector<float> data(10, 1.f);
  auto errors = w.run([&](int r) {
    all_reduce(w.ctx(r), AllReduceArgs{.data = data.data(), .count = 10, .algorithm = Algorithm::kSingleCopy});
  });
  for (const auto& e : errors) {
    CHECK(e.find("all_reduce runs single_copy only where the group's ranks read each other's memory") !=
          std::string::npos);
  }
}

TEST_MAIN
