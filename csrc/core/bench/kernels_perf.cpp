// The CPU kernels' loops alone, one thread, 1 Mi elements (in cache on most
// servers): median and range of 15 runs, in µs. Built by CMake beside the
// native tests (native-build-plain/kernels_perf); to compare two builds, run
// both in turns. Usage: kernels_perf [elements]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../kernels/bucket_pack.h"
#include "../kernels/reduce_kernels.h"

using namespace pycomm::core;

namespace {

template <class F>
void report(const char* what, F f) {
  std::vector<double> us;
  for (int r = 0; r < 15; ++r) {
    const auto a = std::chrono::steady_clock::now();
    f();
    const auto b = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("%-36s %9.1f  (%.1f-%.1f)\n", what, us[us.size() / 2], us.front(), us.back());
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? size_t(std::strtoull(argv[1], nullptr, 10)) : size_t(1) << 20;
  std::vector<uint16_t> a(n, 0x3c00), b(n, 0x4000), out(n);  // 16-bit patterns: 1.0 and 2.0 (float16)
  std::vector<float> f(n, 1.5f), g(n, 2.5f), acc(n);
  const void* halves[2] = {a.data(), b.data()};
  const void* floats[2] = {f.data(), g.data()};
  std::printf("vector path: %s; %zu elements; median (range) of 15 runs, us\n", cpu_vector_path(), n);
  report("reduce float32 sum, 2 sources", [&] {
    reduce_sources(DType::kFloat32, ReduceOp::kSum, acc.data(), floats, 2, n, 2);
  });
  report("reduce float16 sum, 2 sources", [&] {
    reduce_sources(DType::kFloat16, ReduceOp::kSum, out.data(), halves, 2, n, 2);
  });
  report("reduce bfloat16 sum, 2 sources", [&] {
    reduce_sources(DType::kBFloat16, ReduceOp::kSum, out.data(), halves, 2, n, 2);
  });
  report("ring middle float16", [&] {
    ring_middle(DType::kFloat16, ReduceOp::kSum, f.data(), a.data(), acc.data(), n);
  });
  report("ring last bfloat16", [&] {
    ring_last(DType::kBFloat16, ReduceOp::kSum, f.data(), a.data(), out.data(), nullptr, n, 2);
  });
  BucketSlice to_bf16{f.data(), out.data(), n};
  report("pack float32 -> bfloat16, scaled", [&] {
    copy_slices(DType::kFloat32, DType::kBFloat16, &to_bf16, 1, 0.5);
  });
  BucketSlice to_f32{a.data(), acc.data(), n};
  report("unpack float16 -> float32, scaled", [&] {
    copy_slices(DType::kFloat16, DType::kFloat32, &to_f32, 1, 0.5);
  });
  return 0;
}
