// Times the CUDA all-reduce kernels with ranks as threads of one process on
// one GPU, one stream each: kernels of different ranks run side by side, which
// is the honest way to time them on one GPU (docs/cuda.md, "One GPU, several ranks").
// Buffers come from plain cudaMalloc and are shared by pointer (no IPC in one
// process). float32 sum, sizes doubling from --min-bytes to --max-bytes.
//
//   threads_all_reduce_bench --ranks 2 --min-bytes 8 --max-bytes 256M --iters 50 --json out.json
//   options: --warmup N, --blocks N (0: the launcher's default; at most SMs / ranks, so
//            that all ranks' blocks are resident at once), --buffer-bytes 64M,
//            --algorithms direct,two_shot,ring, --timeout-ms 10000, --one-launch
//
// --one-launch: a correctness mode for compute-sanitizer, not a timing. The
// sanitizer runs one kernel at a time, so ranks launched apart (one kernel per
// rank) would each wait for the others until their in-kernel timeout, and the
// sanitizer would check nothing. With --one-launch every all-reduce is ONE
// launch whose blocks are every rank's blocks (all_ranks_kernel,
// all_reduce_kernels.cuh: the same device code as the per-rank kernels), each
// rank's arguments in the kernel's parameter space. All of them must be
// resident at once (they wait for each other): the bench refuses a grid larger
// than the SMs hold (the kernel's occupancy), and launches it cooperatively
// where the GPU supports that, which guarantees it. #wrong is counted as in
// the timed mode; no times are printed.
//   compute-sanitizer --tool memcheck threads_all_reduce_bench --one-launch --ranks 2
//       --min-bytes 12 --max-bytes 96K --buffer-bytes 32K --iters 1 --warmup 0   (one line)
//
// Time: per iteration, the slowest rank's time between the events recorded
// around its launch in a back-to-back loop; the median over iterations.
// algbw = bytes / time; busbw = algbw * 2 (n-1) / n (nccl-tests' all-reduce).
//
// Ceiling, measured in the same run: on one GPU the ranks share one HBM. An
// all-reduce of S bytes per rank must at least read the n inputs and write the
// n outputs: 2 n S bytes of HBM traffic, which is what n device-to-device
// copies of S bytes move. So floor_us = n * (median time of a cudaMemcpyAsync
// of S bytes), and ceil_busbw is busbw at that time. The kernels move more
// (staging copies, peer reads), so vs_floor (time / floor) says how far each is
// from memory-bound. The latency floor is a launch of an empty kernel plus a
// stream sync, timed on the host.
//
// Every result is checked: rank r's input is (i % 7) + r, so every output
// element must be n (i % 7) + n (n-1) / 2, exactly; #wrong counts the others.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../all_reduce_kernels.cuh"
#include "../cuda_all_reduce.h"

namespace {

using pycomm::core::Algorithm;
using pycomm::cuda::CudaAllReduceArgs;
using pycomm::cuda::DeviceStatus;
using pycomm::cuda::SignalPad;

#define CUDA_CHECK(call)                                                                        \
  do {                                                                                          \
    const cudaError_t err_ = (call);                                                            \
    if (err_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                                             \
    }                                                                                           \
  } while (0)

struct Options {
  int ranks = 2;
  size_t min_bytes = 8;
  size_t max_bytes = size_t(256) << 20;
  int iters = 50;
  int warmup = 5;
  int blocks = 0;
  size_t buffer_bytes = size_t(64) << 20;
  uint64_t timeout_ms = 10000;
  std::vector<Algorithm> algorithms{Algorithm::kDirect, Algorithm::kTwoShot, Algorithm::kRing};
  std::string json;
  bool one_launch = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "threads_all_reduce_bench: %s\nusage: threads_all_reduce_bench [--ranks N] [--min-bytes B] "
               "[--max-bytes B] [--iters N] [--warmup N] [--blocks N] [--buffer-bytes B] "
               "[--algorithms direct,two_shot,ring] [--timeout-ms MS] [--json PATH] [--one-launch]   "
               "(B: 8, 4K, 256M, 1G)\n",
               why);
  std::exit(1);
}

size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) usage("a size must start with a number");
  switch (*end) {
    case '\0': return v;
    case 'K': case 'k': return v << 10;
    case 'M': case 'm': return v << 20;
    case 'G': case 'g': return v << 30;
  }
  usage("a size ends in K, M or G, or nothing");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--one-launch") {  // the one option without a value
      o.one_launch = true;
      continue;
    }
    if (i + 1 >= argc) usage("every option but --one-launch takes a value");
    const std::string v = argv[++i];
    if (flag == "--ranks") o.ranks = std::atoi(v.c_str());
    else if (flag == "--min-bytes") o.min_bytes = parse_bytes(v);
    else if (flag == "--max-bytes") o.max_bytes = parse_bytes(v);
    else if (flag == "--iters") o.iters = std::atoi(v.c_str());
    else if (flag == "--warmup") o.warmup = std::atoi(v.c_str());
    else if (flag == "--blocks") o.blocks = std::atoi(v.c_str());
    else if (flag == "--buffer-bytes") o.buffer_bytes = parse_bytes(v);
    else if (flag == "--timeout-ms") o.timeout_ms = std::strtoull(v.c_str(), nullptr, 10);
    else if (flag == "--json") o.json = v;
    else if (flag == "--algorithms") {
      o.algorithms.clear();
      size_t at = 0;
      while (at <= v.size()) {
        const size_t comma = std::min(v.find(',', at), v.size());
        const std::string name = v.substr(at, comma - at);
        if (name == "direct") o.algorithms.push_back(Algorithm::kDirect);
        else if (name == "two_shot") o.algorithms.push_back(Algorithm::kTwoShot);
        else if (name == "ring") o.algorithms.push_back(Algorithm::kRing);
        else usage("algorithms: direct (one shot), two_shot, ring");
        at = comma + 1;
      }
    } else {
      usage(("unknown option " + flag).c_str());
    }
  }
  if (o.ranks < 1 || o.ranks > pycomm::cuda::kMaxRanks) usage("--ranks must be 1..8");
  if (o.iters < 1 || o.warmup < 0) usage("--iters must be >= 1, --warmup >= 0");
  if (o.min_bytes < 4 || o.min_bytes > o.max_bytes) usage("need 4 <= min-bytes <= max-bytes");
  return o;
}

// Rank threads meet here between phases (C++17: no std::barrier).
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const unsigned long gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int arrived_ = 0;
  unsigned long generation_ = 0;
};

__global__ void fill_input(float* p, size_t n, int rank) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = float(i % 7 + size_t(rank));
}

__global__ void count_wrong(const float* p, size_t n, int world, unsigned long long* wrong) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float expected = float(size_t(world) * (i % 7) + size_t(world) * size_t(world - 1) / 2);
    if (p[i] != expected) atomicAdd(wrong, 1ull);
  }
}

__global__ void empty_kernel() {}

struct Rank {
  float* input = nullptr;
  float* output = nullptr;
  void* staging = nullptr;
  SignalPad* pad = nullptr;
  DeviceStatus* status = nullptr;         // host view
  DeviceStatus* status_device = nullptr;  // the kernel's view of the same memory
  unsigned long long* wrong = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> events;
  uint64_t epoch_base = 0;
  std::vector<float> times_ms;
};

// What every rank's launch shares (float32 sum; each rank then sets its own
// rank, input, output and status).
CudaAllReduceArgs float_sum_args(const Options& o, const pycomm::cuda::PeerMemory& peers,
                                 size_t count, Algorithm alg, int sm_count) {
  CudaAllReduceArgs a{};
  a.world = o.ranks;
  a.peers = peers;
  a.count = count;
  a.dtype = pycomm::core::DType::kFloat32;
  a.op = pycomm::core::ReduceOp::kSum;
  a.algorithm = alg;
  a.timeout_ns = o.timeout_ms * 1000000ull;
  a.blocks = o.blocks;
  a.sm_count = sm_count;
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Row {
  size_t bytes;
  size_t count;
  std::string algorithm;
  int blocks;
  double time_us;
  double algbw;
  double busbw;
  unsigned long long wrong;
  double floor_us;
  double ceil_busbw;
};

// One timed phase of every rank at once: rank_body(r) on its own thread.
void on_every_rank(int ranks, const std::function<void(int)>& rank_body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      CUDA_CHECK(cudaSetDevice(0));
      rank_body(r);
    });
  }
  for (std::thread& t : threads) t.join();
}

double memcpy_median_us(Rank& rank, size_t bytes, const Options& o) {
  std::vector<double> us;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    CUDA_CHECK(cudaEventRecord(rank.events[0], rank.stream));
    CUDA_CHECK(cudaMemcpyAsync(rank.output, rank.input, bytes, cudaMemcpyDeviceToDevice, rank.stream));
    CUDA_CHECK(cudaEventRecord(rank.events[1], rank.stream));
    CUDA_CHECK(cudaEventSynchronize(rank.events[1]));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, rank.events[0], rank.events[1]));
    if (i >= o.warmup) us.push_back(ms * 1e3);
  }
  return median(us);
}

double empty_launch_median_us(Rank& rank) {
  std::vector<double> us;
  for (int i = 0; i < 200; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    empty_kernel<<<1, 1, 0, rank.stream>>>();
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaStreamSynchronize(rank.stream));
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(us);
}

// The rows as printed; --one-launch rows carry no times (time_us null).
void write_json(const std::string& path, const Options& o, const char* gpu, double launch_us,
                const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fprintf(f, "{\"bench\": \"threads_all_reduce\", \"mode\": \"%s\", \"gpu\": \"%s\", \"ranks\": %d, "
                  "\"dtype\": \"float32\", \"op\": \"sum\", \"iters\": %d, \"empty_launch_us\": %.3f, \"rows\": [\n",
               o.one_launch ? "one_launch" : "threads", gpu, o.ranks, o.iters, launch_us);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const char* sep = i + 1 < rows.size() ? "," : "";
    if (o.one_launch) {
      std::fprintf(f,
                   "  {\"bytes\": %zu, \"count\": %zu, \"algorithm\": \"%s\", \"blocks\": %d, \"time_us\": null, "
                   "\"wrong\": %llu}%s\n",
                   r.bytes, r.count, r.algorithm.c_str(), r.blocks, r.wrong, sep);
      continue;
    }
    std::fprintf(f,
                 "  {\"bytes\": %zu, \"count\": %zu, \"algorithm\": \"%s\", \"blocks\": %d, \"time_us\": %.3f, "
                 "\"algbw_gbs\": %.3f, \"busbw_gbs\": %.3f, \"wrong\": %llu, \"floor_us\": %.3f, "
                 "\"ceil_busbw_gbs\": %.3f}%s\n",
                 r.bytes, r.count, r.algorithm.c_str(), r.blocks, r.time_us, r.algbw, r.busbw, r.wrong, r.floor_us,
                 r.ceil_busbw, sep);
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

// float32 sum, as the timed mode.
using SumF32 = pycomm::cuda::Reduction<pycomm::cuda::SumOp, false>;

const void* all_ranks_kernel_of(Algorithm alg) {
  using pycomm::cuda::all_ranks_kernel;
  switch (alg) {
    case Algorithm::kDirect:
      return reinterpret_cast<const void*>(&all_ranks_kernel<Algorithm::kDirect, float, SumF32>);
    case Algorithm::kTwoShot:
      return reinterpret_cast<const void*>(&all_ranks_kernel<Algorithm::kTwoShot, float, SumF32>);
    case Algorithm::kRing:
      return reinterpret_cast<const void*>(&all_ranks_kernel<Algorithm::kRing, float, SumF32>);
    default: return nullptr;
  }
}

// Whether any rank's status records a timeout (each printed). The kernels have ended.
bool report_timeouts(const std::vector<Rank>& ranks, Algorithm alg) {
  bool any = false;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const DeviceStatus& s = *ranks[r].status;
    if (s.code == 0) continue;
    std::fprintf(stderr, "rank %zu: %s timed out in block %d waiting for rank %d (flag %llu)\n", r,
                 pycomm::core::algorithm_name(alg), s.block, s.peer, (unsigned long long)s.epoch);
    any = true;
  }
  return any;
}

// --one-launch (see the top of this file): each all-reduce one launch of every
// rank's blocks, warmup + iters times a size and algorithm, then every rank's
// output checked. Exit codes as in the timed mode.
int run_one_launch(const Options& o, std::vector<Rank>& ranks, const pycomm::cuda::PeerMemory& peers, int sm_count,
                   const cudaDeviceProp& prop) {
  using pycomm::cuda::kAllReduceThreads;
  int cooperative = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, 0));
  const int launches = o.warmup + o.iters;
  std::printf("# threads_all_reduce_bench --one-launch: %s, %d ranks as the blocks of ONE %s kernel launch per "
              "all-reduce, float32 sum, %d launches a row\n",
              prop.name, o.ranks, cooperative ? "cooperative" : "plain", launches);
  std::printf("# a correctness mode, for compute-sanitizer (which runs one kernel at a time), not a timing: "
              "no times; #wrong counts every rank's output\n");
  std::printf("%12s %12s %8s %5s %10s %8s %7s\n", "size", "count", "algo", "blks", "dtype_op", "launches", "#wrong");
  Rank& lead = ranks[0];  // its stream runs every launch, one after the other
  std::vector<Row> rows;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const size_t count = std::max<size_t>(1, bytes / sizeof(float));
    const size_t real_bytes = count * sizeof(float);
    for (Algorithm alg : o.algorithms) {
      const CudaAllReduceArgs proto = float_sum_args(o, peers, count, alg, sm_count);
      const int blocks = pycomm::cuda::blocks_of(proto);
      pycomm::cuda::AllRanksArgs all{};
      all.world = o.ranks;
      for (int r = 0; r < o.ranks; ++r) {
        CudaAllReduceArgs a = proto;
        a.rank = r;
        a.input = ranks[size_t(r)].input;
        a.output = ranks[size_t(r)].output;
        a.status = ranks[size_t(r)].status_device;
        a.blocks = blocks;  // as the kernel sees it: gridDim.x / world
        if (const char* bad = pycomm::cuda::check_args(a)) {
          std::fprintf(stderr, "threads_all_reduce_bench --one-launch: rank %d, %s, %zu bytes: %s\n", r,
                       pycomm::core::algorithm_name(alg), real_bytes, bad);
          return 1;
        }
        all.ranks[r] = a;
      }
      // Every block waits for its peers' blocks: all must be resident at once.
      const void* kernel = all_ranks_kernel_of(alg);
      int per_sm = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, int(kAllReduceThreads), 0));
      const long long grid = (long long)blocks * o.ranks;
      if (grid > (long long)per_sm * sm_count) {
        std::fprintf(stderr,
                     "threads_all_reduce_bench --one-launch: %d ranks x %d blocks = %lld blocks in one launch, but "
                     "the %d SMs hold at most %d of this kernel's blocks each at once, and every block waits for "
                     "the others: use fewer --ranks or --blocks\n",
                     o.ranks, blocks, grid, sm_count, per_sm);
        return 1;
      }
      for (Rank& k : ranks) CUDA_CHECK(cudaMemsetAsync(k.output, 0, real_bytes, lead.stream));
      for (int i = 0; i < launches; ++i) {
        for (int r = 0; r < o.ranks; ++r) all.ranks[r].epoch_base = ranks[size_t(r)].epoch_base;
        void* params[] = {&all};
        if (cooperative) {
          CUDA_CHECK(cudaLaunchCooperativeKernel(kernel, dim3(unsigned(grid)), dim3(kAllReduceThreads), params, 0,
                                                 lead.stream));
        } else {
          CUDA_CHECK(cudaLaunchKernel(kernel, dim3(unsigned(grid)), dim3(kAllReduceThreads), params, 0, lead.stream));
        }
        for (int r = 0; r < o.ranks; ++r) ranks[size_t(r)].epoch_base += pycomm::cuda::epochs_used(all.ranks[r]);
      }
      CUDA_CHECK(cudaStreamSynchronize(lead.stream));
      if (report_timeouts(ranks, alg)) return 3;
      unsigned long long wrong = 0;
      for (Rank& k : ranks) {
        unsigned long long w = 0;
        CUDA_CHECK(cudaMemsetAsync(k.wrong, 0, sizeof(w), lead.stream));
        count_wrong<<<1024, 256, 0, lead.stream>>>(k.output, count, o.ranks, k.wrong);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpyAsync(&w, k.wrong, sizeof(w), cudaMemcpyDeviceToHost, lead.stream));
        CUDA_CHECK(cudaStreamSynchronize(lead.stream));
        wrong += w;
      }
      Row row{};
      row.bytes = real_bytes;
      row.count = count;
      row.algorithm = pycomm::core::algorithm_name(alg);
      row.blocks = blocks;
      row.wrong = wrong;
      rows.push_back(row);
      std::printf("%12zu %12zu %8s %5d %10s %8d %7llu\n", row.bytes, row.count, row.algorithm.c_str(), row.blocks,
                  "f32_sum", launches, row.wrong);
      std::fflush(stdout);
    }
  }
  if (!o.json.empty()) write_json(o.json, o, prop.name, 0.0, rows);
  unsigned long long total_wrong = 0;
  for (const Row& r : rows) total_wrong += r.wrong;
  return total_wrong == 0 ? 0 : 4;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  // All ranks share this GPU: the launcher keeps their blocks within its SMs.
  int sm_count = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  const int most_blocks = pycomm::cuda::max_blocks_per_rank(o.ranks, sm_count);
  if (o.blocks > most_blocks) {
    std::fprintf(stderr,
                 "threads_all_reduce_bench: --blocks %d: %d ranks on %d SMs fit at most %d blocks a rank "
                 "resident at once\n",
                 o.blocks, o.ranks, sm_count, most_blocks);
    return 1;
  }
  const size_t max_count = o.max_bytes / sizeof(float);

  std::vector<Rank> ranks(size_t(o.ranks));
  pycomm::cuda::PeerMemory peers{};
  peers.buffer_bytes = o.buffer_bytes;
  for (int r = 0; r < o.ranks; ++r) {
    Rank& k = ranks[size_t(r)];
    CUDA_CHECK(cudaMalloc(&k.input, max_count * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&k.output, max_count * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&k.staging, o.buffer_bytes));
    CUDA_CHECK(cudaMalloc(&k.pad, pycomm::cuda::signal_pad_bytes()));
    CUDA_CHECK(cudaMemset(k.pad, 0, pycomm::cuda::signal_pad_bytes()));
    CUDA_CHECK(cudaHostAlloc(&k.status, sizeof(DeviceStatus), cudaHostAllocMapped));
    std::memset(k.status, 0, sizeof(DeviceStatus));
    CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&k.status_device), k.status, 0));
    CUDA_CHECK(cudaMalloc(&k.wrong, sizeof(unsigned long long)));
    CUDA_CHECK(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking));
    k.events.resize(size_t(o.iters) + 1);
    for (cudaEvent_t& e : k.events) CUDA_CHECK(cudaEventCreate(&e));
    fill_input<<<1024, 256, 0, k.stream>>>(k.input, max_count, r);
    CUDA_CHECK(cudaGetLastError());
    peers.buffers[r] = k.staging;
    peers.pads[r] = k.pad;
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  if (o.one_launch) return run_one_launch(o, ranks, peers, sm_count, prop);

  const double launch_us = empty_launch_median_us(ranks[0]);
  std::printf("# threads_all_reduce_bench: %s, %d ranks as threads (one stream each), float32 sum, %d iters\n",
              prop.name, o.ranks, o.iters);
  std::printf("# latency floor: empty kernel launch + sync %.2f us; floor_us = ranks x D2D memcpy of the bytes\n",
              launch_us);
  std::printf("# %d SMs: at most %d blocks a rank keep %d ranks' blocks resident at once; blocks per rank (blks): "
              "%s\n",
              sm_count, most_blocks, o.ranks, o.blocks > 0 ? "--blocks" : "the launcher's default for the size");
  std::printf("%12s %12s %8s %5s %10s %9s %10s %10s %7s %10s %10s %8s\n", "size", "count", "algo", "blks", "dtype_op",
              "time(us)", "algbw", "busbw", "#wrong", "floor(us)", "ceil_bus", "vs_floor");

  std::vector<Row> rows;
  ThreadBarrier barrier(o.ranks);
  const double bus_factor = o.ranks > 1 ? 2.0 * (o.ranks - 1) / o.ranks : 1.0;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const size_t count = std::max<size_t>(1, bytes / sizeof(float));
    const size_t real_bytes = count * sizeof(float);
    const double floor_us = o.ranks * memcpy_median_us(ranks[0], real_bytes, o);
    for (Algorithm alg : o.algorithms) {
      const CudaAllReduceArgs proto = float_sum_args(o, peers, count, alg, sm_count);
      std::vector<unsigned long long> wrong(size_t(o.ranks), 0);
      on_every_rank(o.ranks, [&](int r) {
        Rank& k = ranks[size_t(r)];
        CudaAllReduceArgs a = proto;
        a.rank = r;
        a.input = k.input;
        a.output = k.output;
        a.status = k.status_device;
        auto launch = [&] {
          a.epoch_base = k.epoch_base;
          const cudaError_t err = pycomm::cuda::launch_all_reduce(a, k.stream);
          if (err != cudaSuccess) {
            std::fprintf(stderr, "rank %d: launch_all_reduce(%s, %zu bytes): %s (%s)\n", r,
                         pycomm::core::algorithm_name(alg), real_bytes, cudaGetErrorString(err),
                         pycomm::cuda::check_args(a) ? pycomm::cuda::check_args(a) : "launch failed");
            std::exit(2);
          }
          k.epoch_base += pycomm::cuda::epochs_used(a);
        };
        CUDA_CHECK(cudaMemsetAsync(k.output, 0, real_bytes, k.stream));
        barrier.arrive_and_wait();
        for (int i = 0; i < o.warmup; ++i) launch();
        CUDA_CHECK(cudaStreamSynchronize(k.stream));
        barrier.arrive_and_wait();
        CUDA_CHECK(cudaEventRecord(k.events[0], k.stream));
        for (int i = 0; i < o.iters; ++i) {
          launch();
          CUDA_CHECK(cudaEventRecord(k.events[size_t(i) + 1], k.stream));
        }
        CUDA_CHECK(cudaStreamSynchronize(k.stream));
        k.times_ms.assign(size_t(o.iters), 0.0f);
        for (int i = 0; i < o.iters; ++i)
          CUDA_CHECK(cudaEventElapsedTime(&k.times_ms[size_t(i)], k.events[size_t(i)], k.events[size_t(i) + 1]));
        CUDA_CHECK(cudaMemsetAsync(k.wrong, 0, sizeof(unsigned long long), k.stream));
        count_wrong<<<1024, 256, 0, k.stream>>>(k.output, count, o.ranks, k.wrong);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpyAsync(&wrong[size_t(r)], k.wrong, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                   k.stream));
        CUDA_CHECK(cudaStreamSynchronize(k.stream));
      });
      if (report_timeouts(ranks, alg)) return 3;
      std::vector<double> slowest(size_t(o.iters), 0.0);
      for (const Rank& k : ranks)
        for (int i = 0; i < o.iters; ++i) slowest[size_t(i)] = std::max(slowest[size_t(i)], 1e3 * k.times_ms[size_t(i)]);
      Row row;
      row.bytes = real_bytes;
      row.count = count;
      row.algorithm = pycomm::core::algorithm_name(alg);
      row.blocks = pycomm::cuda::blocks_of(proto);  // what every rank launched
      row.time_us = median(slowest);
      row.algbw = real_bytes / row.time_us / 1e3;  // GB/s
      row.busbw = row.algbw * bus_factor;
      row.wrong = 0;
      for (unsigned long long w : wrong) row.wrong += w;
      row.floor_us = floor_us;
      row.ceil_busbw = real_bytes / floor_us / 1e3 * bus_factor;
      rows.push_back(row);
      std::printf("%12zu %12zu %8s %5d %10s %9.2f %10.2f %10.2f %7llu %10.2f %10.2f %8.2f\n", row.bytes, row.count,
                  row.algorithm.c_str(), row.blocks, "f32_sum", row.time_us, row.algbw, row.busbw, row.wrong,
                  row.floor_us, row.ceil_busbw, row.time_us / row.floor_us);
      std::fflush(stdout);
    }
  }
  if (!o.json.empty()) write_json(o.json, o, prop.name, launch_us, rows);
  unsigned long long total_wrong = 0;
  for (const Row& r : rows) total_wrong += r.wrong;
  return total_wrong == 0 ? 0 : 4;
}
