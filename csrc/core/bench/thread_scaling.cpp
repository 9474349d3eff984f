// The copy and reduction loops of a large message on a team of threads,
// against memcpy on the same threads: how far one rank's moving of bytes
// scales with the cores it owns (its thread team, kernels/thread_team.h,
// splits each piece alike). Each team here splits the message into
// contiguous shares, one a thread, 64-byte aligned; every run
// starts its threads afresh (tens of microseconds, under 1% of a run at the
// default size). Reported: GB/s of bytes read plus written, median and range
// of 9 runs, and the speed-up over one thread. Built by CMake beside the
// native tests (native-build-plain/thread_scaling).
// Usage: thread_scaling [max_threads (default: this process's cores)] [MiB a buffer (64)]
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "../kernels/reduce_kernels.h"

using namespace pycomm::core;

namespace {

int affinity_cores() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

// Runs body(first, count) over [0, n) elements split among `threads`.
double run_team(int threads, size_t n, const std::function<void(size_t, size_t)>& body) {
  const size_t grain = 16;  // elements: 64 bytes of float32
  const size_t share = (n / size_t(threads) + grain - 1) / grain * grain;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> team;
  for (int t = 1; t < threads; ++t) {
    const size_t first = std::min(n, share * size_t(t));
    team.emplace_back(body, first, std::min(n, first + share) - first);
  }
  body(0, std::min(n, share));
  for (auto& th : team) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Result {
  double median, low, high;  // GB/s
};

Result measure(int threads, size_t n, double bytes, const std::function<void(size_t, size_t)>& body) {
  run_team(threads, n, body);  // pages touched, caches warm
  std::vector<double> gbs;
  for (int r = 0; r < 9; ++r) gbs.push_back(bytes / run_team(threads, n, body) / 1e9);
  std::sort(gbs.begin(), gbs.end());
  return {gbs[gbs.size() / 2], gbs.front(), gbs.back()};
}

}  // namespace

int main(int argc, char** argv) {
  const int max_threads = argc > 1 ? std::atoi(argv[1]) : affinity_cores();
  const size_t mib = argc > 2 ? size_t(std::strtoull(argv[2], nullptr, 10)) : 64;
  const size_t n = (mib << 20) / sizeof(float);
  if (max_threads < 1 || n == 0) {
    std::fprintf(stderr, "usage: thread_scaling [max_threads >= 1] [MiB a buffer >= 1]\n");
    return 2;
  }
  std::vector<float> a(n, 1.5f), b(n, 2.5f), out(n, 0.0f);
  const double fbytes = double(n) * sizeof(float);

  struct Loop {
    const char* name;
    double bytes;  // read plus written
    std::function<void(size_t, size_t)> body;
  };
  const std::vector<Loop> loops = {
      {"memcpy", 2 * fbytes,
       [&](size_t first, size_t count) { std::memcpy(out.data() + first, a.data() + first, count * sizeof(float)); }},
      {"reduce float32 sum, 2 sources", 3 * fbytes,
       [&](size_t first, size_t count) {
         const void* srcs[2] = {a.data() + first, b.data() + first};
         reduce_sources(DType::kFloat32, ReduceOp::kSum, out.data() + first, srcs, 2, count, 2);
       }},
  };

  std::vector<int> teams;
  for (int t = 1; t < max_threads; t *= 2) teams.push_back(t);
  teams.push_back(max_threads);
  std::printf("vector path: %s; %zu MiB a buffer; %d core(s) in this process's affinity\n",
              cpu_vector_path(), mib, affinity_cores());
  std::printf("%-32s %7s %12s %15s %9s\n", "loop", "threads", "GB/s", "(range)", "x 1 thread");
  for (const Loop& loop : loops) {
    double one = 0;
    for (int t : teams) {
      const Result r = measure(t, n, loop.bytes, loop.body);
      if (t == 1) one = r.median;
      std::printf("%-32s %7d %12.2f  (%5.2f-%5.2f) %9.2f\n", loop.name, t, r.median, r.low, r.high,
                  r.median / one);
    }
  }
  return 0;
}
