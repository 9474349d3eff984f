// Where a call's time goes: while the profile is on, the front-end, the
// core's collectives and point-to-point add the time of each part of their
// work to one process-wide sum per part (pycomm.tools.profile reads it; the
// benches print it per collective and size). Off by default: a timed part
// then pays one relaxed load and no clock.
//
//   call         inside the backend: its entry (checks, routing, staging, the
//                job run inline or queued) and the wait for a queued job
//   job          inside a job's body: a plan and the core's collective
//   wait         waits on a peer's flag (handshakes, links), within a job
//   copy         copies through shared memory, and local ones
//   reduce       reductions (and the ring's combine-and-send steps)
//   cross_memory copies straight out of a peer's memory (cross_memory.h)
//   backup       restore_on_failure's backup copy
//
// Parts nest: call holds job, which holds the rest, so what a call spends
// outside its job (front-end, hand-off) is call - job, and what a job spends
// outside the named parts is job minus their sum. Point-to-point adds its
// progress to call (and to wait, copy, cross_memory within), not to job.
#pragma once

#include <atomic>
#include <cstdint>

namespace pycomm::core {

enum class CallPart : int { kCall, kJob, kWait, kCopy, kReduce, kCrossMemory, kBackup };
inline constexpr int kCallParts = int(CallPart::kBackup) + 1;
const char* call_part_name(CallPart part);

struct CallProfileSums {
  uint64_t ns[kCallParts] = {};
  uint64_t count[kCallParts] = {};  // how many times each part was entered
};

class CallProfile {
 public:
  static bool on() { return on_.load(std::memory_order_relaxed); }
  // Turns the profile on or off; either way its sums start at zero.
  static void set(bool on);
  // counts: whether this adds one to the part's count (a call's wait for its
  // queued job adds time to the call it belongs to, not another call).
  static void add(CallPart part, uint64_t ns, bool counts = true);
  static CallProfileSums take();  // the sums so far; they start again at zero

 private:
  static std::atomic<bool> on_;
};

// Adds the time from its construction to its destruction to `part` (when
// the profile was on at its construction).
class PartTimer {
 public:
  explicit PartTimer(CallPart part, bool counts = true)
      : part_(part), counts_(counts), start_(CallProfile::on() ? now() : 0) {}
  ~PartTimer() {
    if (start_) CallProfile::add(part_, now() - start_, counts_);
  }
  PartTimer(const PartTimer&) = delete;
  PartTimer& operator=(const PartTimer&) = delete;

 private:
  static uint64_t now();
  CallPart part_;
  bool counts_;
  uint64_t start_;
};

}  // namespace pycomm::core
