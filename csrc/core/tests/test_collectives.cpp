// The collectives that move data or reduce it to some ranks (reduce-scatter,
// all-gather, broadcast, reduce, gather, scatter, all-to-all) against their
// references, with ranks run as threads that share one mapping (so
// ThreadSanitizer sees every access). The all-reduce: test_all_reduce.cpp;
// failures and mismatches: test_collective_failures.cpp.
#include <cstring>

#include "collective_world.h"

using namespace pycomm::core;

namespace {

template <class T>
void check_broadcast_and_reduce(World& w, DType dtype, ReduceOp op, size_t count, int root) {
  const int world = w.size();
  std::vector<std::vector<T>> data(world, std::vector<T>(count));
  for (int r = 0; r < world; ++r) fill(data[r], r, op);
  const auto original = data;
  auto errors = w.run([&](int r) {
    broadcast(w.ctx(r), BroadcastArgs{.data = data[r].data(), .count = count, .dtype = dtype, .root = root});
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) CHECK(same_bytes(data[r], original[root]));
  data = original;
  errors = w.run([&](int r) {
    reduce(w.ctx(r), ReduceArgs{.data = data[r].data(), .count = count, .dtype = dtype, .op = op, .root = root});
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
    scatter(w.ctx(r), ScatterArgs{.input = r == root ? out[r].data() : nullptr, .output = part[r].data(),
                                  .count = count, .dtype = dtype, .root = root});
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) CHECK(same_bytes(part[r], in[r]));
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
            all_gather(w.ctx(r), AllGatherArgs{.input = in.data(), .output = out[r].data(), .count = count,
                                               .dtype = dtype, .algorithm = algo});
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
            broadcast(w.ctx(r), BroadcastArgs{.data = data[r].data(), .count = count, .dtype = dtype, .root = root});
          });
          for (const auto& e : errors) CHECK(e.empty());
          for (int r = 0; r < world; ++r) CHECK(data[r] == pattern(root));
        }
      }
    }
    if (world < 2) continue;
    std::vector<uint8_t> buf(64);
    auto errors = w.run([&](int r) {
      broadcast(w.ctx(r), BroadcastArgs{.data = buf.data(), .count = 4, .dtype = opaque_dtype(r == 0 ? 44 : 45, 2)});
    });
    for (const auto& e : errors) {
      CHECK(e.find("dtype differs") != std::string::npos);
      CHECK(e.find("opaque#44/2B") != std::string::npos || e.find("opaque#45/2B") != std::string::npos);
    }
  }
}

TEST(many_back_to_back_collectives_stay_in_step) {
  World w(3, small_buffers());
  std::vector<std::vector<int64_t>> data(3, std::vector<int64_t>(300));
  auto errors = w.run([&](int r) {
    for (int it = 0; it < 300; ++it) {
      for (auto& v : data[r]) v = r + it;
      all_reduce(w.ctx(r), AllReduceArgs{.data = data[r].data(), .count = size_t(1 + it % 300),
                                         .dtype = DType::kInt64,
                                         .algorithm = it % 2 ? Algorithm::kRing : Algorithm::kDirect});
      if (data[r][0] != 3 * it + 3) throw std::runtime_error("wrong sum");
    }
  });
  for (const auto& e : errors) CHECK(e.empty());
}

TEST_MAIN
