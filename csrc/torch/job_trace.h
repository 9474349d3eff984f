// The job trace: while it is on, every job a communicator of this process runs
// (queued for its worker, or run inline by a caller that found it idle) leaves
// a record of when it was queued, when its body started and ended, and when
// its future completed with its callbacks. pycomm.tools.trace reads it; the
// DDP bench splits a training step into parts with it. Off by default: a job
// then pays one relaxed load.
//
// Times are CLOCK_MONOTONIC nanoseconds, the clock of Python's
// time.perf_counter() and time.monotonic() on Linux.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "../core/transport/session.h"  // monotonic_ns(): the trace's clock

namespace pycomm {

struct JobTimes {
  const char* what = "collective";  // a string literal: the collective's name
  uint64_t bytes = 0;               // of its output tensors
  bool queued = false;              // went through the worker (false: ran inline)
  uint64_t queued_ns = 0;           // handed to the communicator
  uint64_t started_ns = 0;          // its body began (worker or caller)
  uint64_t ended_ns = 0;            // its body returned
  uint64_t completed_ns = 0;        // its future completed and its callbacks ran
};

class JobTrace {
 public:
  static bool on() { return on_.load(std::memory_order_relaxed); }
  // Turns the trace on or off; either way it starts empty.
  static void set(bool on);
  static void add(const JobTimes& t);
  // The records so far, oldest first, and how many were dropped past the cap;
  // the trace is emptied.
  static std::vector<JobTimes> take(uint64_t* dropped);

 private:
  static std::atomic<bool> on_;
};

}  // namespace pycomm
