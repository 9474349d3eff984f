// How the host thread sees one launched collective kernel through to its end,
// whatever happens to it or to the peers. Torch-free and free of the CUDA
// runtime: the kernel is reached through callbacks, so the native tests drive
// this logic with a stand-in kernel and inject every fault on a CPU
// (csrc/cuda/tests/test_kernel_watch.cpp), and the glue (csrc/torch/cuda_path.cpp)
// gives it the real launch and event query.
//
// One rule for every failure: a launch error, a CUDA error seen while polling
// (an illegal address, a lost context), the kernel's own timeout record, a dead
// peer, another rank's abort, or the host's backstop. This rank's kernel is
// asked to stop and given a bounded grace to leave (the memory it writes stays
// valid while it may still write it); the session is aborted, so every peer's
// host thread stops its own kernel at its next check instead of at the
// kernel's wait bound; and the error is raised here. Without the abort, a rank
// whose launch failed would leave its peers' kernels spinning until the
// collective's timeout, and the step would fail with nothing said about why.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "../core/errors.h"
#include "../core/transport/session.h"
#include "peer_memory.h"

namespace pycomm::cuda {

// What polling a launched kernel found. Polling never blocks.
struct KernelPoll {
  enum State { kRunning, kFinished, kFailed };
  State state = kRunning;
  std::string error;  // kFailed: the CUDA error as the runtime words it
};

struct KernelCallbacks {
  // Queues the kernel (and whatever marks its end); "" or the launch's error.
  std::function<std::string()> launch;
  std::function<KernelPoll()> poll;
};

struct WatchTiming {
  // After the host gives up on a kernel, how long it waits for the kernel to
  // see the stop flag and leave before the memory it writes is handed back.
  uint64_t stop_grace_ns = 2'000'000'000;
  // Past the session's deadline the kernel reports its own timeout (its waits
  // end with the collective's time, counted from when its blocks start); this
  // backstop, counted from the launch, is for a kernel that cannot: one that
  // never started, behind other work, or a hung GPU.
  uint64_t backstop_ns = 5'000'000'000;
  // How often the peer watch and the abort are checked (a system call).
  uint64_t check_every_ns = 1'000'000;
};

// Launches the kernel and returns once it finished cleanly; raises (after
// stopping it and aborting the session, as above) otherwise. `status` is the
// host's view of the kernel's record and stop flag; `what` names the
// collective in messages ("all_reduce (cuda)").
inline void run_watched_kernel(core::Session& session, const char* what, DeviceStatus* status,
                               const KernelCallbacks& kernel, const WatchTiming& timing = {}) {
  const std::string who = "rank " + std::to_string(session.rank()) + ": " + what + ": ";

  // The kernels poll `failed` in every wait and leave when it is set.
  auto stop_kernel = [&] {
    __atomic_store_n(&status->failed, 1u, __ATOMIC_RELEASE);
    const uint64_t give_up = core::monotonic_ns() + timing.stop_grace_ns;
    while (kernel.poll().state == KernelPoll::kRunning && core::monotonic_ns() < give_up) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  };

  const std::string launch_error = kernel.launch();
  if (!launch_error.empty()) {
    // Some of it may be queued (a launch that failed after the kernel, on the
    // event that marks its end): whatever runs leaves at its first check.
    __atomic_store_n(&status->failed, 1u, __ATOMIC_RELEASE);
    throw core::CommError(session.abort(who + "the kernel could not be launched: " + launch_error));
  }

  const core::WaitPolicy& policy = session.policy();
  const uint64_t start = core::monotonic_ns();
  const uint64_t spin_end = start + uint64_t(policy.spin_us * 1e3);
  const uint64_t yield_end = spin_end + uint64_t(policy.yield_us * 1e3);
  const uint64_t backstop = start + session.remaining_ns() + timing.backstop_ns;
  uint64_t next_check = spin_end;  // not every poll: the peer watch costs a system call
  try {
    for (;;) {
      const KernelPoll p = kernel.poll();
      if (p.state == KernelPoll::kFinished) break;
      if (p.state == KernelPoll::kFailed) {
        throw core::CommError(session.abort(who + "CUDA error while the kernel ran: " + p.error));
      }
      const uint64_t now = core::monotonic_ns();
      if (now >= next_check) {
        next_check = now + timing.check_every_ns;
        session.check_alive();  // a dead peer or another rank's abort
        if (now > backstop) {
          throw core::CommTimeout(session.abort(
              who + "the kernel neither finished nor reported within the timeout (it may never "
                    "have started: work queued before it on the GPU, or a hung GPU)"));
        }
      }
      if (now < spin_end) continue;
      if (now < yield_end) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  } catch (...) {
    stop_kernel();
    throw;
  }
  // The kernel finished; it may have finished by giving up on a peer. `failed`
  // is stored (release) after the record's other fields.
  if (__atomic_load_n(&status->failed, __ATOMIC_ACQUIRE) != 0 && status->code != 0) {
    std::ostringstream os;
    os << who << "Timed out after " << policy.timeout_s << " s on the GPU, still waiting for rank "
       << status->peer << " (block " << status->block << ", epoch " << status->epoch << ")";
    throw core::CommTimeout(session.abort(os.str()));
  }
}

}  // namespace pycomm::cuda
