#include "call_profile.h"

#include <time.h>

namespace pycomm::core {
namespace {

// Relaxed: the sums are read once the timed calls are over (the bench's
// barrier orders them); a part only ever adds.
std::atomic<uint64_t> g_ns[kCallParts];
std::atomic<uint64_t> g_count[kCallParts];

}  // namespace

std::atomic<bool> CallProfile::on_{false};

const char* call_part_name(CallPart part) {
  switch (part) {
    case CallPart::kCall: return "call";
    case CallPart::kJob: return "job";
    case CallPart::kWait: return "wait";
    case CallPart::kCopy: return "copy";
    case CallPart::kReduce: return "reduce";
    case CallPart::kCrossMemory: return "cross_memory";
    case CallPart::kBackup: return "backup";
  }
  return "unknown";
}

void CallProfile::set(bool on) {
  take();
  on_.store(on, std::memory_order_relaxed);
}

void CallProfile::add(CallPart part, uint64_t ns, bool counts) {
  g_ns[int(part)].fetch_add(ns, std::memory_order_relaxed);
  if (counts) g_count[int(part)].fetch_add(1, std::memory_order_relaxed);
}

CallProfileSums CallProfile::take() {
  CallProfileSums s;
  for (int i = 0; i < kCallParts; ++i) {
    s.ns[i] = g_ns[i].exchange(0, std::memory_order_relaxed);
    s.count[i] = g_count[i].exchange(0, std::memory_order_relaxed);
  }
  return s;
}

uint64_t PartTimer::now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace pycomm::core
