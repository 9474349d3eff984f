// The host's watch over a launched CUDA kernel (kernel_watch.h), with every
// fault injected on a CPU: ranks are threads over a real session, and each
// rank's "kernel" is a stand-in that the watch polls. A stand-in that waits
// for a peer behaves as the real kernels do: it runs until its peer arrives or
// its own stop flag (DeviceStatus::failed) is set, then leaves.
//
// What each case proves is the rule in kernel_watch.h: whichever rank fails,
// and however, every rank raises soon (far inside the collective's timeout),
// the failing rank's message says what failed, the peers' name it, and every
// kernel was asked to stop.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../../core/errors.h"
#include "../../core/tests/check.h"
#include "../../core/transport/session.h"
#include "../kernel_watch.h"

namespace {

using namespace pycomm;
using core::Session;
using cuda::DeviceStatus;
using cuda::KernelPoll;

constexpr double kTimeoutS = 20.0;  // every case must end far inside it

// A stand-in kernel, as one rank's watch sees it.
struct FakeKernel {
  std::string launch_error;           // non-empty: the launch fails
  std::function<KernelPoll(DeviceStatus&)> poll;  // each call, the kernel's state
};

// Waits for a peer that never comes: runs until asked to stop.
KernelPoll waits_for_a_peer(DeviceStatus& s) {
  return {__atomic_load_n(&s.failed, __ATOMIC_ACQUIRE) ? KernelPoll::kFinished : KernelPoll::kRunning, {}};
}
KernelPoll finishes(DeviceStatus&) { return {KernelPoll::kFinished, {}}; }

struct Outcome {
  std::string kind;  // "", "CommTimeout", "CommError"
  std::string message;
  double seconds = 0;
  bool launched = false;
  bool stop_requested = false;
};

struct World {
  explicit World(int world, double timeout_s = kTimeoutS) {
    core::WaitPolicy policy;
    policy.timeout_s = timeout_s;
    policy.spin_us = 2;
    policy.yield_us = 20;
    for (int r = 0; r < world; ++r) {
      sessions.push_back(r == 0 ? Session::create(0, world, core::new_segment_name(), policy, {})
                                : Session::join(r, *sessions[0]));
    }
    sessions[0]->unlink_name();
    for (auto& s : sessions) s->start();
  }

  // Each rank runs one watched collective with its stand-in kernel.
  std::vector<Outcome> run(const std::vector<FakeKernel>& kernels,
                           const cuda::WatchTiming& timing = {}) {
    std::vector<Outcome> out(sessions.size());
    std::vector<DeviceStatus> status(sessions.size(), DeviceStatus{});
    std::vector<std::thread> threads;
    for (size_t r = 0; r < sessions.size(); ++r) {
      threads.emplace_back([&, r] {
        Session& s = *sessions[r];
        const auto start = std::chrono::steady_clock::now();
        cuda::KernelCallbacks cb;
        cb.launch = [&] {
          out[r].launched = true;
          return kernels[r].launch_error;
        };
        cb.poll = [&] { return kernels[r].poll(status[r]); };
        try {
          s.begin("all_reduce");
          s.handshake(core::Fingerprint{});
          cuda::run_watched_kernel(s, "all_reduce (cuda)", &status[r], cb, timing);
        } catch (const core::CommTimeout& e) {
          out[r].kind = "CommTimeout";
          out[r].message = e.what();
        } catch (const core::CommError& e) {
          out[r].kind = "CommError";
          out[r].message = e.what();
        }
        out[r].seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        out[r].stop_requested = __atomic_load_n(&status[r].failed, __ATOMIC_ACQUIRE) != 0;
      });
    }
    for (auto& t : threads) t.join();
    for (size_t r = 0; r < out.size(); ++r) {
      std::printf("  rank %zu: %.3f s %s %s\n", r, out[r].seconds, out[r].kind.c_str(),
                  out[r].message.c_str());
    }
    return out;
  }

  std::vector<std::unique_ptr<Session>> sessions;
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every rank raised, soon, and every kernel that was launched was asked to
// stop. (A rank still in the handshake when another aborts raises there and
// launches nothing.)
void check_all_ended_soon(const std::vector<Outcome>& out) {
  for (const Outcome& o : out) {
    CHECK(!o.kind.empty());
    CHECK(o.seconds < 3.0);
    CHECK(o.stop_requested || !o.launched);
  }
}

TEST(clean_launches_raise_nothing_and_leave_the_session_usable) {
  World w(3);
  auto out = w.run({{"", finishes}, {"", finishes}, {"", finishes}});
  for (const Outcome& o : out) {
    CHECK(o.kind.empty());
    CHECK(!o.stop_requested);
  }
  out = w.run({{"", finishes}, {"", finishes}, {"", finishes}});
  for (const Outcome& o : out) CHECK(o.kind.empty());
}

TEST(a_failed_launch_on_one_rank_ends_every_rank_at_once) {
  World w(3);
  auto out = w.run({{"", waits_for_a_peer},
                    {"too many resources requested for launch", waits_for_a_peer},
                    {"", waits_for_a_peer}});
  check_all_ended_soon(out);
  CHECK(out[1].kind == "CommError");
  CHECK(contains(out[1].message, "rank 1: all_reduce (cuda): the kernel could not be launched: "
                                 "too many resources requested for launch"));
  // The peers raise the failing rank's own words.
  CHECK(contains(out[0].message, "rank 1: all_reduce (cuda): the kernel could not be launched"));
  CHECK(contains(out[2].message, "rank 1: all_reduce (cuda): the kernel could not be launched"));
}

TEST(a_cuda_error_while_running_stops_the_peers_kernels) {
  World w(2);
  std::atomic<int> polls{0};
  auto faults_later = [&](DeviceStatus&) -> KernelPoll {
    if (polls.fetch_add(1) < 50) return {KernelPoll::kRunning, {}};
    return {KernelPoll::kFailed, "an illegal memory access was encountered"};
  };
  auto out = w.run({{"", waits_for_a_peer}, {"", faults_later}});
  check_all_ended_soon(out);
  CHECK(out[1].kind == "CommError");
  CHECK(contains(out[1].message, "rank 1: all_reduce (cuda): CUDA error while the kernel ran: "
                                 "an illegal memory access was encountered"));
  CHECK(contains(out[0].message, "rank 1: all_reduce (cuda): CUDA error"));
}

TEST(the_kernels_own_timeout_record_is_raised_and_ends_the_peers) {
  World w(2);
  // Rank 0's kernel gave up on rank 1 (its record is written, then `failed`),
  // while rank 1's kernel still waits for rank 0.
  auto gave_up_on_rank_1 = [](DeviceStatus& s) -> KernelPoll {
    if (!__atomic_load_n(&s.failed, __ATOMIC_ACQUIRE)) {
      s.code = 1;
      s.peer = 1;
      s.block = 3;
      s.epoch = 17;
      __atomic_store_n(&s.failed, 1u, __ATOMIC_RELEASE);
    }
    return {KernelPoll::kFinished, {}};
  };
  auto out = w.run({{"", gave_up_on_rank_1}, {"", waits_for_a_peer}});
  check_all_ended_soon(out);
  CHECK(out[0].kind == "CommTimeout");
  CHECK(contains(out[0].message, "on the GPU, still waiting for rank 1 (block 3, epoch 17)"));
  CHECK(contains(out[1].message, "still waiting for rank 1"));
}

TEST(a_kernel_that_never_leaves_is_given_up_at_the_backstop) {
  World w(2, /*timeout_s=*/0.3);
  cuda::WatchTiming timing;
  timing.backstop_ns = 200'000'000;
  timing.stop_grace_ns = 100'000'000;
  auto hung = [](DeviceStatus&) { return KernelPoll{KernelPoll::kRunning, {}}; };
  auto out = w.run({{"", hung}, {"", hung}}, timing);
  for (const Outcome& o : out) {
    CHECK(o.kind == "CommTimeout");
    CHECK(o.stop_requested);
    // timeout + backstop + grace, and some slack for a loaded machine
    CHECK(o.seconds < 0.3 + 0.2 + 0.1 + 2.0);
  }
  CHECK(contains(out[0].message + out[1].message, "the kernel neither finished nor reported"));
}

}  // namespace

TEST_MAIN
