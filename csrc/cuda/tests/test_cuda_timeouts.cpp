// The CUDA all-reduce kernels' failures, proven on the CPU as their protocol
// is (test_cuda_protocol.cpp: the kernel bodies on host threads): an absent
// rank is named by every rank, a timeout makes one complete record however
// many blocks hit it, the deadline bounds the whole launch, and a failed flag
// releases every waiting block.
#include "host_ranks.h"

namespace {


// What the host sees of the ranks' records while their kernels run: like the
// glue, it polls `failed` with acquire, then reads the other fields. Under
// ThreadSanitizer a field not ordered before the release of `failed` is a
// reported race; and the snapshot must equal the final record (complete once
// published, never rewritten).
class StatusWatcher {
 public:
  explicit StatusWatcher(std::vector<DeviceStatus>& status)
      : status_(status), seen_(status.size()), thread_([this] { run(); }) {}
  ~StatusWatcher() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      done_ = true;
      thread_.join();
    }
  }
  // Whether the watcher saw rank r's record published, and the same as it is now.
  bool saw_final(int r) const {
    const DeviceStatus& a = seen_[size_t(r)];
    const DeviceStatus& b = status_[size_t(r)];
    return a.failed == 1 && a.code == b.code && a.peer == b.peer && a.block == b.block && a.epoch == b.epoch;
  }

 private:
  void run() {
    for (;;) {
      const bool last = done_.load();  // one more look after the blocks ended
      for (size_t r = 0; r < status_.size(); ++r) {
        DeviceStatus& seen = seen_[r];
        if (seen.failed != 0 || cuda::load_acquire(&status_[r].failed) == 0) continue;
        seen.code = status_[r].code;
        seen.peer = status_[r].peer;
        seen.block = status_[r].block;
        seen.epoch = status_[r].epoch;
        seen.failed = 1;
      }
      if (last) return;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::vector<DeviceStatus>& status_;
  std::vector<DeviceStatus> seen_;
  std::atomic<bool> done_{false};
  std::thread thread_;  // last: starts once the members above exist
};

// Ranks 0..world-1 but `absent` run `launches` launches; `absent` runs only
// `absent_launches` of them. The launches the absent rank takes part in get a
// patient timeout (it bounds a whole launch, however slow the sanitizer); the
// present ranks start the one it misses together, with a short one, so that
// only the absent rank can be late. Checks that every running block returns,
// that each rank's status names `absent`, and the time it took.
void run_absent_rank(Algorithm alg, int absent_launches) {
  const int world = 3, blocks = 2, absent = 2, launches = absent_launches + 2;
  constexpr uint64_t kTimeoutNs = 250'000'000;
  HostRanks host(world, 1024);
  std::vector<float> data(size_t(world) * 1000, 1.0f);
  std::atomic<int> failures{0};
  std::barrier<> present_start((world - 1) * blocks);
  const auto start = std::chrono::steady_clock::now();
  StatusWatcher watcher(host.status);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    for (int b = 0; b < blocks; ++b) {
      threads.emplace_back([&, r, b] {
        CudaAllReduceArgs a = host.float_args(r, &data[size_t(r) * 1000], 1000, ReduceOp::kMax, alg, blocks, 0);
        for (int it = 0; it < (r == absent ? absent_launches : launches); ++it) {
          a.timeout_ns = it < absent_launches ? kPatientNs : kTimeoutNs;
          if (it == absent_launches) present_start.arrive_and_wait();
          if (!run_block(a, Lanes{0, 1, b, blocks})) {
            ++failures;
            return;  // as the kernel ends; the host launches no more
          }
          a.epoch_base += cuda::epochs_used(a);
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  watcher.stop();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK_EQ(failures.load(), (world - 1) * blocks);
  CHECK(seconds < 5.0);  // one timeout each, however slow the sanitizer
  for (int r = 0; r < world; ++r) {
    const DeviceStatus& s = host.status[size_t(r)];
    if (r == absent) {
      CHECK_EQ(s.code, 0u);
      CHECK_EQ(host.pads[size_t(r)].timeout_claim, 0u);
      continue;
    }
    CHECK_EQ(s.code, uint32_t(cuda::DeviceError::kTimeout));
    CHECK_EQ(s.failed, 1u);
    CHECK_EQ(s.peer, absent);
    CHECK(s.block >= 0 && s.block < blocks);
    CHECK_EQ(host.pads[size_t(r)].timeout_claim, 1u);
    CHECK(watcher.saw_final(r));
    // The first barrier of the launch the absent rank missed.
    CudaAllReduceArgs a{};
    a.world = world;
    a.peers = host.peers;
    a.count = 1000;
    a.dtype = DType::kFloat32;
    a.algorithm = alg;
    a.blocks = blocks;
    CHECK_EQ(s.epoch, cuda::epochs_used(a) * uint64_t(absent_launches) + 1);
  }
}

TEST(absent_rank_is_named_by_every_rank) {
  for (Algorithm alg : kAlgorithms) {
    run_absent_rank(alg, 0);  // never arrives
    run_absent_rank(alg, 2);  // leaves after two launches
  }
}

// Many blocks of one rank time out on the same absent peer at about the same
// moment: one claims the record, the others leave it alone, and the host sees
// one complete record (the claim is device-scope, on the rank's own pad).
TEST(simultaneous_timeouts_make_one_record) {
  constexpr int kBlocks = 16;
  for (Algorithm alg : kAlgorithms) {
    HostRanks host(2, 4096);  // 256 bytes a block: every block has a piece, so each waits
    std::vector<float> data(1024, 1.0f);
    std::atomic<int> failures{0};
    std::barrier<> start(kBlocks);
    StatusWatcher watcher(host.status);
    std::vector<std::thread> threads;
    for (int b = 0; b < kBlocks; ++b) {
      threads.emplace_back([&, b] {
        // Rank 1 never arrives.
        const CudaAllReduceArgs a =
            host.float_args(0, data.data(), data.size(), ReduceOp::kSum, alg, kBlocks, 20'000'000);
        start.arrive_and_wait();
        if (!run_block(a, Lanes{0, 1, b, kBlocks})) ++failures;
      });
    }
    for (std::thread& t : threads) t.join();
    watcher.stop();
    CHECK_EQ(failures.load(), kBlocks);
    const DeviceStatus& s = host.status[0];
    CHECK_EQ(s.code, uint32_t(cuda::DeviceError::kTimeout));
    CHECK_EQ(s.failed, 1u);
    CHECK_EQ(s.peer, 1);
    CHECK(s.block >= 0 && s.block < kBlocks);
    CHECK_EQ(s.epoch, 1u);  // every algorithm's first barrier
    CHECK_EQ(host.pads[0].timeout_claim, 1u);
    CHECK(watcher.saw_final(0));
    CHECK_EQ(host.status[1].failed, 0u);
    CHECK_EQ(host.pads[1].timeout_claim, 0u);
  }
}

// The claim alone, raced by threads that each would write a record of their
// own: exactly one wins, and the record is all the winner's.
TEST(record_timeout_claims_once) {
  constexpr int kThreads = 8;
  for (int round = 0; round < 20; ++round) {
    HostRanks host(1, 16);
    std::barrier<> start(kThreads);
    std::vector<int> won(kThreads, 0);
    StatusWatcher watcher(host.status);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const cuda::Waiter w{&host.status[0], &host.pads[0].timeout_claim, 0, t};
        start.arrive_and_wait();
        won[size_t(t)] = cuda::record_timeout(w, 100 + t, 1000 + uint64_t(t)) ? 1 : 0;
      });
    }
    for (std::thread& t : threads) t.join();
    watcher.stop();
    int winners = 0;
    for (int w : won) winners += w;
    CHECK_EQ(winners, 1);
    const DeviceStatus& s = host.status[0];
    CHECK(s.block >= 0 && s.block < kThreads);
    if (s.block < 0 || s.block >= kThreads) continue;
    CHECK_EQ(won[size_t(s.block)], 1);
    CHECK_EQ(s.peer, 100 + s.block);
    CHECK_EQ(s.epoch, 1000 + uint64_t(s.block));
    CHECK_EQ(s.code, uint32_t(cuda::DeviceError::kTimeout));
    CHECK(watcher.saw_final(0));
  }
}

// The deadline bounds the collective, not each wait: a peer that arrives at
// every barrier 60 ms after the last, well within a 150 ms bound per wait,
// still fails a launch of eight barriers (480 ms) once 150 ms have passed
// since the block started.
TEST(deadline_bounds_the_whole_collective) {
  HostRanks host(2, 1024);
  std::vector<float> data(1024, 1.0f);  // 4 pieces of 256 floats: 8 barriers
  const CudaAllReduceArgs a =
      host.float_args(0, data.data(), data.size(), ReduceOp::kSum, Algorithm::kDirect, 1, 150'000'000);
  CHECK_EQ(cuda::epochs_used(a), 8u);
  // Rank 1 stands in as its barrier flags in rank 0's pad only (its staging
  // stays zero, which rank 0 reads but nobody writes).
  std::thread peer([&] {
    for (uint64_t e = 1; e <= 8; ++e) {
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      cuda::store_release(&host.pads[0].barrier[0].from[1], e);
    }
  });
  const bool ok = run_block(a, Lanes{0, 1, 0, 1});
  peer.join();
  CHECK(!ok);
  CHECK_EQ(host.status[0].peer, 1);
  CHECK(host.status[0].epoch >= 1 && host.status[0].epoch < 8);
}

// A wait that finds its flag never looks at the clock; one that does not
// finds the deadline passed within kPollsPerDeadlineCheck polls.
TEST(wait_for_flag_and_the_deadline) {
  HostRanks host(2, 1024);
  const cuda::Waiter past{&host.status[0], &host.pads[0].timeout_claim, 0, 3};
  uint64_t* flag = &host.pads[0].barrier[3].from[1];
  cuda::store_release(flag, uint64_t(5));
  CHECK(cuda::wait_for_flag(flag, 5, 1, past));
  CHECK_EQ(host.status[0].failed, 0u);
  CHECK(!cuda::wait_for_flag(flag, 6, 1, past));
  CHECK_EQ(host.status[0].failed, 1u);
  CHECK_EQ(host.status[0].peer, 1);
  CHECK_EQ(host.status[0].block, 3);
  CHECK_EQ(host.status[0].epoch, 6u);
}

// A block waiting with a long deadline leaves at once when another block of
// its rank (or the host) has set `failed`, without writing a record.
TEST(failed_flag_releases_waiting_blocks) {
  HostRanks host(2, 1024);
  host.status[0].failed = 1;
  const cuda::Waiter w{&host.status[0], &host.pads[0].timeout_claim, cuda::deadline_after(3'600'000'000'000), 0};
  const auto start = std::chrono::steady_clock::now();
  CHECK(!cuda::block_barrier(host.peers.pads, 0, 2, 0, 1, w));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_EQ(host.status[0].code, 0u);  // only the first failure is recorded
  CHECK_EQ(host.pads[0].timeout_claim, 0u);
}

}  // namespace

TEST_MAIN
