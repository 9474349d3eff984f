// The session, the shared-memory data path and the collectives, with ranks run
// as threads that share one mapping (so ThreadSanitizer sees every access).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "collective_world.h"

using namespace pycomm::core;

namespace {



template <class T>
void check_reduce_scatter(World& w, DType dtype, ReduceOp op, size_t count, Algorithm algo) {
  const int world = w.size();
  std::vector<std::vector<T>> in(world, std::vector<T>(count * world)), out(world, std::vector<T>(count));
  for (int r = 0; r < world; ++r) fill(in[r], r, op);
  const auto original = in;
  auto errors = w.run([&](int r) {
    ReduceScatterArgs a;
    a.input = in[r].data();
    a.output = out[r].data();
    a.count = count;
    a.dtype = dtype;
    a.op = op;
    a.algorithm = algo;
    reduce_scatter(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) {
    CHECK(same_bytes(in[r], original[r]));  // out of place: the input is never written
    for (size_t i = 0; i < count; ++i) {
      CHECK_EQ(as_double(out[r][i]), as_double(reduced<T>(world, size_t(r) * count + i, op)));
    }
  }
}

template <class T>
void check_all_gather(World& w, DType dtype, size_t count, Algorithm algo) {
  const int world = w.size();
  std::vector<std::vector<T>> in(world, std::vector<T>(count)), out(world, std::vector<T>(count * world));
  for (int r = 0; r < world; ++r) fill(in[r], r, ReduceOp::kSum);
  auto errors = w.run([&](int r) {
    AllGatherArgs a;
    a.input = in[r].data();
    a.output = out[r].data();
    a.count = count;
    a.dtype = dtype;
    a.algorithm = algo;
    all_gather(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) {
    for (int q = 0; q < world; ++q) {
      CHECK(std::memcmp(out[r].data() + size_t(q) * count, in[q].data(), count * sizeof(T)) == 0);
    }
  }
}

template <class T>
void check_broadcast_and_reduce(World& w, DType dtype, ReduceOp op, size_t count, int root) {
  const int world = w.size();
  std::vector<std::vector<T>> data(world, std::vector<T>(count));
  for (int r = 0; r < world; ++r) fill(data[r], r, op);
  const auto original = data;
  auto errors = w.run([&](int r) {
    BroadcastArgs a;
    a.data = data[r].data();
    a.count = count;
    a.dtype = dtype;
    a.root = root;
    broadcast(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) CHECK(same_bytes(data[r], original[root]));
  data = original;
  errors = w.run([&](int r) {
    ReduceArgs a;
    a.data = data[r].data();
    a.count = count;
    a.dtype = dtype;
    a.op = op;
    a.root = root;
    reduce(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) {
    if (r != root) {
      CHECK(same_bytes(data[r], original[r]));
      continue;
    }
    for (size_t i = 0; i < count; ++i) CHECK_EQ(as_double(data[r][i]), as_double(reduced<T>(world, i, op)));
  }
}

// Values: 1000 * owner + index % 997, distinct across ranks and parts.
template <class T>
void check_gather_and_scatter(World& w, DType dtype, size_t count, int root) {
  const int world = w.size();
  auto value = [](int r, size_t i) { return T(1000 * r + int(i % 97)); };
  std::vector<std::vector<T>> in(world, std::vector<T>(count)), out(world, std::vector<T>(count * world, T(-1)));
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < count; ++i) in[r][i] = value(r, i);
  }
  auto errors = w.run([&](int r) {
    GatherArgs a;
    a.input = in[r].data();
    a.output = r == root ? out[r].data() : nullptr;  // only the root's output exists
    a.count = count;
    a.dtype = dtype;
    a.root = root;
    gather(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int q = 0; q < world; ++q) {
    CHECK(std::memcmp(out[root].data() + size_t(q) * count, in[q].data(), count * sizeof(T)) == 0);
  }
  // Scatter the root's gathered buffer back: every rank gets its own input.
  std::vector<std::vector<T>> part(world, std::vector<T>(count, T(-1)));
  errors = w.run([&](int r) {
    ScatterArgs a;
    a.input = r == root ? out[r].data() : nullptr;
    a.output = part[r].data();
    a.count = count;
    a.dtype = dtype;
    a.root = root;
    scatter(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) CHECK(same_bytes(part[r], in[r]));
}



// Random bytes of valid values of `dtype` (floats of mixed magnitudes, so that
// sums round), the same for a (rank, seed) whatever the run.
std::vector<char> random_values(DType dtype, size_t count, int rank, int seed) {
  std::mt19937_64 gen(uint64_t(seed) * 1000003u + uint64_t(rank));
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-6, 6);
  const size_t esize = dtype_size(dtype);
  std::vector<char> v(count * esize);
  for (size_t i = 0; i < count; ++i) {
    const double x = std::ldexp(unit(gen), exponent(gen));
    char* at = v.data() + i * esize;
    switch (dtype) {
      case DType::kFloat32: { const float f = float(x); std::memcpy(at, &f, 4); break; }
      case DType::kFloat64: std::memcpy(at, &x, 8); break;
      case DType::kFloat16: { const Half h = to_half(float(x)); std::memcpy(at, &h, 2); break; }
      case DType::kBFloat16: { const BFloat16 b = to_bfloat16(float(x)); std::memcpy(at, &b, 2); break; }
      case DType::kBool: *at = char(gen() & 1); break;
      default: { const uint64_t bits = gen(); std::memcpy(at, &bits, esize); break; }
    }
  }
  return v;
}

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
    all_reduce(ctx, all_reduce_args(ar[r].data(), count, dtype, op, algo));
    ReduceScatterArgs s;
    s.input = rs_in[r].data();
    s.output = rs_out[r].data();
    s.count = count;
    s.dtype = dtype;
    s.op = op;
    s.algorithm = algo;
    reduce_scatter(ctx, s);
    AllGatherArgs g;
    g.input = rs_in[r].data();
    g.output = ag_out[r].data();
    g.count = count;
    g.dtype = dtype;
    g.algorithm = algo;
    all_gather(ctx, g);
    BroadcastArgs b;
    b.data = bc[r].data();
    b.count = count;
    b.dtype = dtype;
    b.root = world - 1;
    broadcast(ctx, b);
    ReduceArgs d;
    d.data = red[r].data();
    d.count = count;
    d.dtype = dtype;
    d.op = op;
    d.root = 0;
    reduce(ctx, d);
  });
  for (const auto& e : errors) CHECK(e.empty());
  std::vector<char> all;
  for (int r = 0; r < world; ++r) {
    for (const auto* v : {&ar[r], &rs_out[r], &ag_out[r], &bc[r], &red[r]}) all.insert(all.end(), v->begin(), v->end());
  }
  return all;
}

}  // namespace

TEST(reduce_scatter_all_gather_broadcast_reduce_gather_scatter_all_to_all_match_references) {
  for (int world = 1; world <= 4; ++world) {
    World w(world, small_buffers());
    for (size_t count : {0ul, 1ul, 7ul, 250ul}) {
      for (Algorithm algo : {Algorithm::kDirect, Algorithm::kRing}) {
        for (ReduceOp op : kOps) {
          check_reduce_scatter<float>(w, DType::kFloat32, op, count, algo);
          check_reduce_scatter<BFloat16>(w, DType::kBFloat16, op, count, algo);
          if (op != ReduceOp::kAvg) check_reduce_scatter<int32_t>(w, DType::kInt32, op, count, algo);
        }
        check_all_gather<float>(w, DType::kFloat32, count, algo);
        check_all_gather<int8_t>(w, DType::kInt8, count, algo);
        check_all_gather<double>(w, DType::kFloat64, count, algo);
      }
      for (int root = 0; root < world; ++root) {
        for (ReduceOp op : kOps) check_broadcast_and_reduce<float>(w, DType::kFloat32, op, count, root);
        check_broadcast_and_reduce<Half>(w, DType::kFloat16, ReduceOp::kSum, count, root);
        check_broadcast_and_reduce<int64_t>(w, DType::kInt64, ReduceOp::kMax, count, root);
        check_gather_and_scatter<float>(w, DType::kFloat32, count, root);
        check_gather_and_scatter<int16_t>(w, DType::kBFloat16, count, root);  // 2-byte elements
      }
      check_all_to_all(w, count);
    }
  }
}

// Element types with no arithmetic (float8, complex128 as a whole, ...): the
// collectives that only move data take them by their size, bytes untouched,
// and ranks whose types differ (another tag, same size) are in different
// collectives.
TEST(opaque_element_types_move_by_their_bytes) {
  for (int world = 1; world <= 3; ++world) {
    World w(world, small_buffers());
    for (size_t esize : {1ul, 16ul}) {
      const DType dtype = opaque_dtype(44, esize);
      for (size_t count : {0ul, 1ul, 7ul, 250ul}) {
        const size_t bytes = count * esize;
        auto pattern = [&](int r) {
          std::vector<uint8_t> v(bytes);
          for (size_t i = 0; i < bytes; ++i) v[i] = uint8_t(i * 31 + size_t(r) * 101 + 7);
          return v;
        };
        for (Algorithm algo : {Algorithm::kDirect, Algorithm::kRing}) {
          std::vector<std::vector<uint8_t>> out(world, std::vector<uint8_t>(bytes * world, 0xee));
          auto errors = w.run([&](int r) {
            const std::vector<uint8_t> in = pattern(r);
            AllGatherArgs a;
            a.input = in.data();
            a.output = out[r].data();
            a.count = count;
            a.dtype = dtype;
            a.algorithm = algo;
            all_gather(w.ctx(r), a);
          });
          for (const auto& e : errors) CHECK(e.empty());
          for (int r = 0; r < world; ++r) {
            for (int q = 0; q < world; ++q) {
              CHECK(bytes == 0 || std::memcmp(out[r].data() + size_t(q) * bytes, pattern(q).data(), bytes) == 0);
            }
          }
        }
        for (int root = 0; root < world; ++root) {
          std::vector<std::vector<uint8_t>> data(world);
          for (int r = 0; r < world; ++r) data[r] = pattern(r);
          auto errors = w.run([&](int r) {
            BroadcastArgs a;
            a.data = data[r].data();
            a.count = count;
            a.dtype = dtype;
            a.root = root;
            broadcast(w.ctx(r), a);
          });
          for (const auto& e : errors) CHECK(e.empty());
          for (int r = 0; r < world; ++r) CHECK(data[r] == pattern(root));
        }
      }
    }
    if (world < 2) continue;
    std::vector<uint8_t> buf(64);
    auto errors = w.run([&](int r) {
      BroadcastArgs a;
      a.data = buf.data();
      a.count = 4;
      a.dtype = opaque_dtype(r == 0 ? 44 : 45, 2);
      broadcast(w.ctx(r), a);
    });
    for (const auto& e : errors) {
      CHECK(e.find("dtype differs") != std::string::npos);
      CHECK(e.find("opaque#44/2B") != std::string::npos || e.find("opaque#45/2B") != std::string::npos);
    }
  }
}

TEST(all_to_all_split_mismatch_raises_on_every_rank) {
  World w(3, small_buffers());
  std::vector<float> buf(64, 0.f);
  auto errors = w.run([&](int r) {
    // Rank 2 expects 5 elements from rank 0, which sends 4.
    std::vector<const void*> sp(3, buf.data());
    std::vector<void*> rp(3, buf.data() + 32);
    std::vector<size_t> sc(3, 4), rc(3, 4);
    if (r == 2) rc[0] = 5;
    AllToAllArgs a;
    a.send = sp.data();
    a.send_counts = sc.data();
    a.recv = rp.data();
    a.recv_counts = rc.data();
    all_to_all(w.ctx(r), a);
  });
  for (const auto& e : errors) {
    CHECK(e.rfind("mismatch: ", 0) == 0);
    CHECK(e.find("rank 0 sends 4 elements to rank 2, which expects 5") != std::string::npos);
  }
  CHECK(errors[0] == errors[1] && errors[1] == errors[2]);
  check_all_to_all(w, 3);  // still usable
}

TEST(root_mismatch_raises_on_every_rank) {
  World w(2, small_buffers());
  std::vector<std::vector<float>> data(2, std::vector<float>(10, 1.f));
  auto errors = w.run([&](int r) {
    BroadcastArgs a;
    a.data = data[r].data();
    a.count = 10;
    a.root = r;  // each thinks it is the root
    broadcast(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.find("root differs on rank 1") != std::string::npos);
}

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
    AllReduceArgs a = all_reduce_args(data[r].data(), count, dtype, op, Algorithm::kTwoLevel);
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

TEST(two_level_failure_midway_restores_the_input) {
  // Rank 1 leaves after the first piece: rank 0 has written that piece of its
  // tensor, and puts it back when the second piece's handshake times out.
  Config c = small_buffers();
  c.wait.timeout_s = 0.3;
  World w(2, c);
  const std::vector<int> layout = {0, 1};
  std::vector<std::vector<float>> data(2, std::vector<float>(200));
  for (auto& v : data) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 13);
  }
  const std::vector<float> original = data[0];
  auto errors = w.run([&](int r) {
    AllReduceArgs a;
    a.data = data[r].data();
    a.count = data[r].size();
    a.algorithm = Algorithm::kTwoLevel;
    a.domain_of = layout.data();
    if (r == 0) {
      all_reduce(w.ctx(0), a);
      return;
    }
    // The first piece's three handshakes (of 64 floats, a 256-byte slot), with
    // the same fingerprint, then silence.
    Session& s1 = *w.ranks[1]->session;
    ShmDataPath& p1 = *w.ranks[1]->path;
    const Fingerprint fp =
        fingerprint_of(CollectiveKind::kAllReduce, a.count, a.dtype, Algorithm::kTwoLevel, &a.op, 2);
    s1.begin("all_reduce");
    for (int h = 0; h < 3; ++h) {
      std::memcpy(p1.next_slot(), data[1].data(), 64 * sizeof(float));
      s1.handshake(fp);
    }
  });
  CHECK(errors[0].rfind("timeout: ", 0) == 0);
  CHECK(std::memcmp(data[0].data(), original.data(), original.size() * sizeof(float)) == 0);
}

TEST(mismatched_counts_raise_on_every_rank_and_leave_inputs) {
  for (Algorithm algo : {Algorithm::kDirect, Algorithm::kRing}) {
    World w(3, small_buffers());
    std::vector<std::vector<float>> data = {std::vector<float>(100, 1.f), std::vector<float>(100, 2.f),
                                            std::vector<float>(4000, 3.f)};
    auto errors = w.run([&](int r) {
      AllReduceArgs a;
      a.data = data[r].data();
      a.count = data[r].size();
      a.algorithm = algo;
      all_reduce(w.ctx(r), a);
    });
    for (int r = 0; r < 3; ++r) {
      CHECK(errors[r].rfind("mismatch: ", 0) == 0);
      CHECK(errors[r].find("count differs on rank 2") != std::string::npos);
      for (float v : data[r]) CHECK(v == float(r + 1));
    }
    // The communicator stays usable after a mismatch.
    check_all_reduce<float>(w, DType::kFloat32, ReduceOp::kSum, 1000, algo);
  }
}

TEST(an_algorithm_the_core_does_not_run_is_refused_before_any_rank_waits) {
  // The routing table resolves auto and keeps an explicit choice; the core
  // runs direct, ring, two_level or single_copy and refuses the rest on every
  // rank alike, at once.
  World w(2, small_buffers());
  std::vector<std::vector<float>> data(2, std::vector<float>(100, 1.f));
  for (Algorithm algo : {Algorithm::kTwoShot, Algorithm::kAuto, Algorithm::kLeader}) {
    auto errors = w.run([&](int r) {
      AllReduceArgs a;
      a.data = data[r].data();
      a.count = data[r].size();
      a.algorithm = algo;
      all_reduce(w.ctx(r), a);
    });
    for (int r = 0; r < 2; ++r) {
      const bool is_auto = algo == Algorithm::kAuto;
      CHECK(errors[r].find(is_auto ? "the routing table" : "algorithm: all_reduce runs auto, direct, ring, two_level or single_copy") !=
            std::string::npos);
      for (float v : data[r]) CHECK(v == 1.f);
    }
  }
  check_all_reduce<float>(w, DType::kFloat32, ReduceOp::kSum, 100, Algorithm::kDirect);
}

TEST(mismatch_names_the_rank_that_left_the_majority) {
  World w(3, small_buffers());
  std::vector<std::vector<float>> data = {std::vector<float>(1001, 1.f), std::vector<float>(1000, 2.f),
                                          std::vector<float>(1000, 3.f)};
  auto errors = w.run([&](int r) {
    AllReduceArgs a;
    a.data = data[r].data();
    a.count = data[r].size();
    a.algorithm = Algorithm::kRing;
    all_reduce(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.find("count differs on rank 0") != std::string::npos);
}

TEST(mismatched_dtype_and_collective_kind) {
  World w(2, small_buffers());
  std::vector<float> f(10, 1.f);
  std::vector<int32_t> i(10, 1);
  auto errors = w.run([&](int r) {
    AllReduceArgs a;
    a.data = r == 0 ? static_cast<void*>(f.data()) : static_cast<void*>(i.data());
    a.count = 10;
    a.dtype = r == 0 ? DType::kFloat32 : DType::kInt32;
    a.algorithm = Algorithm::kDirect;
    all_reduce(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.find("dtype differs on rank 1") != std::string::npos);
  errors = w.run([&](int r) {
    if (r == 0) {
      barrier(w.ctx(r));
    } else {
      AllReduceArgs a;
      a.data = f.data();
      a.count = 10;
      a.algorithm = Algorithm::kDirect;
      all_reduce(w.ctx(r), a);
    }
  });
  for (const auto& e : errors) CHECK(e.find("collective differs on rank 1") != std::string::npos);
}

TEST(absent_rank_times_out_names_it_and_aborts_for_everyone) {
  Config c = small_buffers();
  c.wait.timeout_s = 0.3;
  World w(3, c);
  std::vector<std::vector<float>> data(3, std::vector<float>(5000, 1.f));
  const uint64_t t0 = monotonic_ns();
  auto errors = w.run([&](int r) {
    if (r == 2) return;  // never arrives
    AllReduceArgs a;
    a.data = data[r].data();
    a.count = data[r].size();
    a.algorithm = Algorithm::kRing;
    all_reduce(w.ctx(r), a);
  });
  const double elapsed = double(monotonic_ns() - t0) * 1e-9;
  // At the deadline, not before; the upper bound leaves room for sanitizer builds
  // on a loaded machine (the Python tests hold the 10% bound).
  CHECK(elapsed >= 0.3 && elapsed < 1.5);
  for (int r = 0; r < 2; ++r) {
    CHECK(errors[r].rfind("timeout: ", 0) == 0);
    CHECK(errors[r].find("rank 2") != std::string::npos);
    for (float v : data[r]) CHECK(v == 1.f);  // restored or never touched
  }
  // The late rank gets an error too, at once, rather than reading stale data.
  errors = w.run([&](int r) {
    if (r == 2) barrier(w.ctx(2));
  });
  CHECK(errors[2].find("aborted by rank") != std::string::npos);
}

// The link sizes (shm_data_path.h): the ring's link to rank+1 full size, the
// others sharing 512 KiB per rank; streams of many buffers on each, at worlds
// where the other links are smaller than the ring's (and W = 5 with three
// buffers of 64 KiB, where the budget, not link_bytes, sets them).
TEST(all_to_all_streams_through_links_of_each_size) {
  for (int world : {3, 5, 8}) {
    World w(world, default_buffers());
    ShmDataPath& p = *w.ranks[0]->path;
    CHECK_EQ(p.link_bytes_to(1), size_t(256) << 10);
    CHECK_EQ(p.link_bytes_from(world - 1), size_t(256) << 10);
    const size_t other = std::min(size_t(256) << 10, (size_t(512) << 10) / (size_t(world - 2) * 4) / 64 * 64);
    CHECK_EQ(p.link_bytes_to(2), other);
    CHECK_EQ(p.link_bytes_from(world - 2), other);
    CHECK_EQ(w.ranks[size_t(world - 1)]->path->link_bytes_from(world - 3), other);
    // Up to 4 * count int64 a pair: at W = 3, 5 pieces of 128 KiB; at W = 8,
    // 15 of 21 KiB; more than the link's 4 buffers in each case.
    const size_t count = world == 3 ? 20000 : 10000;
    check_all_to_all(w, count);
    check_all_to_all(w, 7);  // and small ones after, still in step
    check_all_to_all(w, count + 1);
  }
  Config c = default_buffers();
  c.data.link_bytes = 64 << 10;
  c.data.link_buffers = 3;
  World w(5, c);
  CHECK_EQ(w.ranks[0]->path->link_bytes_to(1), size_t(64) << 10);
  CHECK_EQ(w.ranks[0]->path->link_bytes_to(3), (size_t(512) << 10) / 9 / 64 * 64);
  check_all_to_all(w, 5000);
}

TEST(ring_all_reduce_uses_the_full_size_link_at_five_ranks) {
  World w(5, default_buffers());
  // 4 MiB and 8 MiB: 16 and 32 pieces of 256 KiB through each ring link.
  check_all_reduce<float>(w, DType::kFloat32, ReduceOp::kSum, (size_t(1) << 20) + 3, Algorithm::kRing);
  check_all_reduce<int64_t>(w, DType::kInt64, ReduceOp::kMax, (size_t(1) << 20) + 5, Algorithm::kRing);
  check_all_reduce<BFloat16>(w, DType::kBFloat16, ReduceOp::kSum, (size_t(1) << 20) + 1, Algorithm::kRing);
}

// Every link buffer each rank can fill lies inside the region, apart from
// every other and from the slots, and its receiver reads the same bytes.
TEST(link_buffers_are_disjoint_and_both_ends_agree) {
  for (int world : {2, 3, 5, 8}) {
    World w(world, default_buffers());
    struct Span { const char* begin; const char* end; };
    std::vector<Span> spans;
    const char* region = w.ranks[0]->session->data_region();
    const char* region_end = region + w.ranks[0]->session->data_bytes();
    for (int r = 0; r < world; ++r) {
      ShmDataPath& p = *w.ranks[size_t(r)]->path;
      for (int h = 0; h < 2; ++h) {
        const char* slot = static_cast<const char*>(h ? p.next_slot() : p.slot(r));
        spans.push_back({slot, slot + p.slot_bytes()});
      }
      for (int peer = 0; peer < world; ++peer) {
        if (peer == r) continue;
        for (size_t m = 0; m < p.link_buffers(); ++m) {
          char* b = static_cast<char*>(p.send_buffer(peer));
          spans.push_back({b, b + p.link_bytes_to(peer)});
          std::memset(b, (r * world + peer) & 0x7f, p.link_bytes_to(peer));
          p.send_commit(peer);
        }
      }
    }
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    CHECK(spans.front().begin >= region);
    CHECK(spans.back().end <= region_end);
    for (size_t i = 1; i < spans.size(); ++i) CHECK(spans[i - 1].end <= spans[i].begin);
    for (int r = 0; r < world; ++r) {
      ShmDataPath& p = *w.ranks[size_t(r)]->path;
      for (int from = 0; from < world; ++from) {
        if (from == r) continue;
        CHECK_EQ(p.link_bytes_from(from), w.ranks[size_t(from)]->path->link_bytes_to(r));
        for (size_t m = 0; m < p.link_buffers(); ++m) {
          const char* b = static_cast<const char*>(p.recv_buffer(from));
          const std::vector<char> want(p.link_bytes_from(from), char((from * world + r) & 0x7f));
          CHECK(std::memcmp(b, want.data(), want.size()) == 0);
          p.recv_commit(from);
        }
      }
    }
  }
}

// A group's data path stays within 2 MiB per rank plus its control lines
// (256 bytes a pair). Before, each rank had a link of 4 x 256 KiB to every
// peer under a 16 MiB cap: per rank 512 KiB + (W-1) MiB, so 1.5, 3.5, 7.5,
// 15.5 and 16.5 MiB at W = 2, 4, 8, 16, 32. W = 2 keeps its 3 MiB + 4 KiB.
TEST(data_region_grows_with_the_world_not_its_square) {
  const ShmDataConfig c;
  for (int world : {2, 4, 8, 16, 32, 64, 128}) {
    const size_t control = (size_t(256) * size_t(world) * size_t(world) + 4095) / 4096 * 4096;
    CHECK(ShmDataPath::bytes_per_rank(world, c) <= size_t(2) << 20);
    CHECK_EQ(ShmDataPath::region(world, c).bytes, control + ShmDataPath::bytes_per_rank(world, c) * size_t(world));
  }
  CHECK_EQ(ShmDataPath::region(2, c).bytes, (size_t(3) << 20) + 4096);
  CHECK_EQ(ShmDataPath::bytes_per_rank(2, c), 2 * (size_t(256) << 10) + 4 * (size_t(256) << 10));
}

TEST(ring_failure_midway_restores_the_input) {
  // Rank 1 enters the same ring collective, passes two messages each way, then
  // stops answering: rank 0 has overwritten part of its tensor by then, and
  // must put it back when it times out.
  Config c = small_buffers();
  c.wait.timeout_s = 0.3;
  World w(2, c);
  std::vector<float> data(20000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = float(i % 17);
  const std::vector<float> original = data;
  auto errors = w.run([&](int r) {
    AllReduceArgs a;
    a.data = data.data();
    a.count = data.size();
    a.algorithm = Algorithm::kRing;
    if (r == 0) {
      all_reduce(w.ctx(0), a);
    } else {
      // Enter the same collective, pass two ring messages through, then stall.
      Session& s1 = *w.ranks[1]->session;
      ShmDataPath& p1 = *w.ranks[1]->path;
      s1.begin("all_reduce");
      s1.handshake(fingerprint_of(CollectiveKind::kAllReduce, a.count, a.dtype, Algorithm::kRing, &a.op));
      for (int m = 0; m < 2; ++m) {
        std::memset(p1.send_buffer(0), 0, p1.link_bytes());
        p1.send_commit(0);
        p1.recv_buffer(0);
        p1.recv_commit(0);
      }
    }
  });
  CHECK(errors[0].rfind("timeout: ", 0) == 0);
  CHECK(std::memcmp(data.data(), original.data(), data.size() * sizeof(float)) == 0);
}

TEST(many_back_to_back_collectives_stay_in_step) {
  World w(3, small_buffers());
  std::vector<std::vector<int64_t>> data(3, std::vector<int64_t>(300));
  auto errors = w.run([&](int r) {
    for (int it = 0; it < 300; ++it) {
      for (auto& v : data[r]) v = r + it;
      AllReduceArgs a;
      a.data = data[r].data();
      a.count = size_t(1 + it % 300);
      a.dtype = DType::kInt64;
      a.algorithm = it % 2 ? Algorithm::kRing : Algorithm::kDirect;
      all_reduce(w.ctx(r), a);
      if (data[r][0] != 3 * it + 3) throw std::runtime_error("wrong sum");
    }
  });
  for (const auto& e : errors) CHECK(e.empty());
}

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

TEST(each_rank_places_its_slots_and_incoming_link_on_its_node) {
  World w(3, default_buffers());
  for (int r = 0; r < 3; ++r) {
    const NumaPlacement& p = w.ranks[size_t(r)]->path->placement();
    if (p.why_not) {
      std::printf("  rank %d: not placed: %s\n", r, p.why_not);
      continue;
    }
    CHECK(p.node >= 0);
    // Two 256 KiB slots and a ring link of 4 x 256 KiB: 384 pages of 4 KiB, less
    // the partial pages at the edges.
    CHECK(p.pages >= (6 * 256 * 1024) / 4096 - 4);
    CHECK_EQ(p.on_node, p.pages);
  }
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
