// What the collectives' native tests share: ranks run as threads of this
// process over one mapping of the session (so ThreadSanitizer sees every
// rank's accesses), a World that runs a function on every rank at once, the
// reference values of a reduction, the checks more than one test file runs
// (all-reduce, reduce-scatter, all-gather, all-to-all) and random inputs. The ranks share this process's pid, so
// cross-memory attach reads their memory here as it would a peer's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../collectives/collectives.h"
#include "../errors.h"
#include "../kernels/half_convert.h"
#include "check.h"
#include "rank_threads.h"

namespace pycomm::core {
namespace {

struct Config {
  WaitPolicy wait;
  ShmDataConfig data;
  CollectiveTuning tuning;
  // Off: the collectives' staging paths, whatever they are given; a test of
  // the single copy turns it on.
  SingleCopy single_copy = SingleCopy::kOff;
};

struct Rank {
  std::unique_ptr<Session> session;
  std::unique_ptr<ShmDataPath> path;
  InputBackup backup;
  CollectiveTuning tuning;
  std::unique_ptr<ThreadTeam> team;
  std::unique_ptr<CrossMemory> cma;
  Context ctx() { return Context{*session, *path, backup, tuning, *team, *cma}; }
};

struct World {
  std::vector<std::unique_ptr<Rank>> ranks;

  World(int world, const Config& config) {
    auto sessions = joined_sessions(world, SegmentPlace::named(new_segment_name()), config.wait,
                                    ShmDataPath::region(world, config.data));
    for (int r = 0; r < world; ++r) {
      auto rk = std::make_unique<Rank>();
      rk->session = std::move(sessions[size_t(r)]);
      rk->path = std::make_unique<ShmDataPath>(*rk->session);
      rk->tuning = config.tuning;
      rk->team = std::make_unique<ThreadTeam>(int(config.tuning.team_threads), config.tuning.team_share_bytes,
                                              config.wait.stream_spin_us);
      ranks.push_back(std::move(rk));
    }
    for (auto& rk : ranks) {
      rk->session->start();
      rk->cma = std::make_unique<CrossMemory>(*rk->session);
    }
    // Every rank probes its peers at once, as the processes of a group do.
    const auto errors = run([&](int r) { ranks[size_t(r)]->cma->agree(config.single_copy); });
    for (const auto& e : errors) {
      if (!e.empty()) throw CommError("World: the single-copy probe failed: " + e);
    }
  }

  int size() const { return int(ranks.size()); }
  Context ctx(int r) { return ranks[size_t(r)]->ctx(); }

  // Runs fn(rank) on one thread per rank; returns what each threw, if anything.
  std::vector<std::string> run(const std::function<void(int)>& fn) { return run_on_threads(ranks.size(), fn); }
};

inline Config small_buffers() {
  Config c;
  // Tiny buffers force many pieces and sub-chunks, and so every code path.
  c.data.slot_bytes = 256;
  c.data.link_bytes = 320;
  c.data.link_buffers = 2;
  c.wait.timeout_s = 20;
  c.wait.spin_us = 2;
  c.wait.stream_spin_us = 2;
  c.wait.yield_us = 20;
  return c;
}

inline Config default_buffers() {
  // The data path's default sizes, where the ring's link and all-to-all's
  // other links differ; short spins, as ranks here outnumber the cores.
  Config c = small_buffers();
  c.data = ShmDataConfig{};
  return c;
}

// Small integers keep every sum, product and average exact in every dtype.
inline double input_value(int rank, size_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) return double(int(1 + (size_t(rank) + i) % 2) * ((i % 3) ? 1 : -1));
  return double(int((i * 7 + size_t(rank) * 13) % 9) - 4);
}

template <class T>
T from_double(double x) {
  if constexpr (std::is_same_v<T, Half>) {
    return to_half(float(x));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return to_bfloat16(float(x));
  } else if constexpr (std::is_same_v<T, float>) {
    return float(x);
  } else if constexpr (std::is_integral_v<T>) {
    return T(int64_t(x));  // negative values wrap for unsigned types, as in torch
  } else {
    return T(x);
  }
}

template <class T>
void fill(std::vector<T>& v, int rank, ReduceOp op) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = from_double<T>(input_value(rank, i, op));
}

template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return double(to_float(v));
  } else {
    return double(v);
  }
}

// The reference: the inputs as stored in T, combined in double (exact for
// these small values), then stored in T (integers wrap, as torch's do).
template <class T>
double expected_value(int world, size_t i, ReduceOp op) {
  auto in = [&](int r) { return as_double(from_double<T>(input_value(r, i, op))); };
  double acc = in(0);
  for (int r = 1; r < world; ++r) {
    const double v = in(r);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProduct: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      default: break;  // the bitwise ops: test_vector_kernels.cpp
    }
  }
  return op == ReduceOp::kAvg ? acc / world : acc;
}

template <class T>
void check_all_reduce(World& w, DType dtype, ReduceOp op, size_t count, Algorithm algo,
                      const std::vector<int>* domain_of = nullptr) {
  const int world = int(w.ranks.size());
  std::vector<std::vector<T>> data(world, std::vector<T>(count));
  for (int r = 0; r < world; ++r) fill(data[r], r, op);
  // two_shot runs in symmetric memory: every rank's copy, here each thread's vector.
  std::vector<char*> copies(world);
  for (int r = 0; r < world; ++r) copies[r] = reinterpret_cast<char*>(data[r].data());
  auto errors = w.run([&](int r) {
    AllReduceArgs a{.data = data[r].data(), .count = count, .dtype = dtype, .op = op, .algorithm = algo};
    if (algo == Algorithm::kTwoShot) {
      a.peers = copies.data();
      a.place = 1;
    }
    if (domain_of) a.domain_of = domain_of->data();
    all_reduce(w.ctx(r), a);
  });
  for (const auto& e : errors) CHECK(e.empty());
  int bad = 0;
  for (size_t i = 0; i < count && bad < 3; ++i) {
    const double want = as_double(from_double<T>(expected_value<T>(world, i, op)));
    if (as_double(data[0][i]) != want) {
      std::fprintf(stderr, "  dtype %s op %s count %zu world %d algo %s: [%zu] = %g, want %g\n",
                   dtype_name(dtype), op_name(op), count, world, algorithm_name(algo), i,
                   as_double(data[0][i]), want);
      ++bad;
    }
  }
  CHECK_EQ(bad, 0);
  for (int r = 1; r < world; ++r) {
    CHECK(std::memcmp(data[0].data(), data[r].data(), count * sizeof(T)) == 0);
  }
}

const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                         ReduceOp::kProduct};

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The reference of a reduction over ranks of input_value(rank, i, op), as T.
template <class T>
T reduced(int world, size_t i, ReduceOp op) {
  return from_double<T>(expected_value<T>(world, i, op));
}

template <class T>
void check_reduce_scatter(World& w, DType dtype, ReduceOp op, size_t count, Algorithm algo) {
  const int world = w.size();
  std::vector<std::vector<T>> in(world, std::vector<T>(count * world)), out(world, std::vector<T>(count));
  for (int r = 0; r < world; ++r) fill(in[r], r, op);
  const auto original = in;
  auto errors = w.run([&](int r) {
    reduce_scatter(w.ctx(r), ReduceScatterArgs{.input = in[r].data(), .output = out[r].data(), .count = count,
                                               .dtype = dtype, .op = op, .algorithm = algo});
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) {
    CHECK(same_bytes(in[r], original[r]));  // out of place: the input is never written
    for (size_t i = 0; i < count; ++i) {
      CHECK_EQ(as_double(out[r][i]), as_double(reduced<T>(world, size_t(r) * count + i, op)));
    }
  }
}

// All-gather into one buffer, or (list) into one buffer per rank, where rank
// q's part lands at the mirrored place.
template <class T>
void check_all_gather(World& w, DType dtype, size_t count, Algorithm algo, bool list = false) {
  const int world = w.size();
  std::vector<std::vector<T>> in(world, std::vector<T>(count)), out(world, std::vector<T>(count * world));
  for (int r = 0; r < world; ++r) fill(in[r], r, ReduceOp::kSum);
  auto errors = w.run([&](int r) {
    std::vector<void*> parts;
    for (int q = 0; q < world; ++q) parts.push_back(out[r].data() + size_t(world - 1 - q) * count);
    all_gather(w.ctx(r), AllGatherArgs{.input = in[r].data(), .output = out[r].data(),
                                       .outputs = list ? parts.data() : nullptr, .count = count, .dtype = dtype,
                                       .algorithm = algo});
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) {
    for (int q = 0; q < world; ++q) {
      const size_t at = size_t(list ? world - 1 - q : q) * count;
      CHECK(std::memcmp(out[r].data() + at, in[q].data(), count * sizeof(T)) == 0);
    }
  }
}

// Random bytes of valid values of `dtype` (floats of mixed magnitudes, so that
// sums round), the same for a (rank, seed) whatever the run.
inline std::vector<char> random_values(DType dtype, size_t count, int rank, int seed) {
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

// All-to-all with uneven splits: rank r sends (r + 2 * p + count) % 5 * count elements to p
// (zero included); each value names its sender, receiver and index, so a
// piece that lands at another offset or in another block shows.
inline void check_all_to_all(World& w, size_t count) {
  const int world = w.size();
  auto elems = [&](int from, int to) { return size_t((from + 2 * to + int(count)) % 5) * count; };
  std::vector<std::vector<std::vector<int64_t>>> send(world), recv(world);
  for (int r = 0; r < world; ++r) {
    for (int p = 0; p < world; ++p) {
      std::vector<int64_t> block(elems(r, p));
      for (size_t i = 0; i < block.size(); ++i) block[i] = (int64_t(r) << 48) + (int64_t(p) << 32) + int64_t(i);
      send[r].push_back(block);
      recv[r].push_back(std::vector<int64_t>(elems(p, r), -1));
    }
  }
  auto errors = w.run([&](int r) {
    std::vector<const void*> sp;
    std::vector<void*> rp;
    std::vector<size_t> sc, rc;
    for (int p = 0; p < world; ++p) {
      sp.push_back(send[r][p].data());
      sc.push_back(send[r][p].size());
      rp.push_back(recv[r][p].data());
      rc.push_back(recv[r][p].size());
    }
    all_to_all(w.ctx(r), AllToAllArgs{.send = sp.data(), .send_counts = sc.data(), .recv = rp.data(),
                                      .recv_counts = rc.data(), .dtype = DType::kInt64});
  });
  for (const auto& e : errors) CHECK(e.empty());
  for (int r = 0; r < world; ++r) {
    for (int p = 0; p < world; ++p) CHECK(recv[r][p] == send[p][r]);
  }
}

}  // namespace
}  // namespace pycomm::core
