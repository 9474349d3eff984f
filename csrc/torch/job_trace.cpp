#include "job_trace.h"

#include <mutex>

namespace pycomm {
namespace {

// A forgotten trace must not grow without bound: a step of DDP makes tens of
// records, a million is hours of training.
constexpr size_t kMaxRecords = size_t(1) << 20;

std::mutex g_mu;
std::vector<JobTimes> g_records;
uint64_t g_dropped = 0;

}  // namespace

std::atomic<bool> JobTrace::on_{false};

void JobTrace::set(bool on) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_records.clear();
  g_dropped = 0;
  on_.store(on, std::memory_order_relaxed);
}

void JobTrace::add(const JobTimes& t) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!on_.load(std::memory_order_relaxed)) return;  // turned off while the job ran
  if (g_records.size() >= kMaxRecords) {
    ++g_dropped;
    return;
  }
  g_records.push_back(t);
}

std::vector<JobTimes> JobTrace::take(uint64_t* dropped) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<JobTimes> out;
  out.swap(g_records);
  if (dropped) *dropped = g_dropped;
  g_dropped = 0;
  return out;
}

}  // namespace pycomm
