// The shared-memory transport: moves bytes and signals between the ranks of one
// host. It knows nothing of reductions or of the ring's schedule; algorithms
// (allreduce.cpp) drive it through three primitives:
//   handshake()          every rank declares the collective it entered; all
//                        wait for all; a disagreement raises CollectiveMismatch;
//   direct_slots()       a per-rank slot that every peer may read after the
//                        handshake that published it;
//   send_*/recv_*        a single-producer single-consumer link from each rank
//                        to rank+1 through ring_buffers buffers.
// Every wait spins briefly, then yields, then sleeps on a futex, and fails with
// CommTimeout at the deadline, when a peer process exits, or when another rank
// has aborted the communicator.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collective.h"
#include "peer_watch.h"
#include "shm_layout.h"
#include "shm_segment.h"

namespace pycomm::core {

struct TransportConfig {
  size_t direct_bytes = 256 * 1024;
  size_t ring_buffer_bytes = 256 * 1024;
  size_t ring_buffers = 4;
  double timeout_s = 300.0;
  // Busy-wait this long before yielding, then yield this long before sleeping:
  // long enough to catch a peer arriving at once, short enough not to starve
  // a peer that shares the core.
  double spin_us = 20.0;
  double yield_us = 200.0;
};

class ShmTransport {
 public:
  // Rank 0 creates the segment (a fresh name, see new_segment_name()); the
  // others attach to the name it shares through the store. Call start() once
  // every rank has attached, then unlink_name().
  static std::unique_ptr<ShmTransport> create(int rank, int world, const std::string& name,
                                              const TransportConfig& config);
  static std::unique_ptr<ShmTransport> attach(int rank, int world, const std::string& name,
                                              const TransportConfig& config);
  // Another rank in this process, sharing `creator`'s mapping. Native tests run
  // ranks as threads this way, so ThreadSanitizer sees every rank's accesses
  // at the same addresses.
  static std::unique_ptr<ShmTransport> join(int rank, const ShmTransport& creator);
  ~ShmTransport();

  // Reads every rank's pid and starts watching the peers. Fails if a rank has
  // not attached.
  void start();
  void unlink_name() { segment_->unlink(); }

  int rank() const { return rank_; }
  int world() const { return world_; }
  const std::string& name() const { return segment_->name(); }
  size_t direct_bytes() const { return layout_.direct_bytes; }
  size_t ring_buffer_bytes() const { return layout_.ring_buffer_bytes; }

  // Starts a collective: sets its deadline, fails at once if the communicator
  // was aborted.
  void begin(const char* what);

  // The direct slot this rank fills for its next handshake.
  void* my_next_direct_slot() { return at(layout_.direct_offset(rank_, arrived_ + 1)); }
  // Every rank's slot for the handshake that just completed, in rank order.
  const void* const* direct_slots() {
    for (int r = 0; r < world_; ++r) {
      slot_ptrs_[size_t(r)] = at(layout_.direct_offset(r, arrived_));
    }
    return slot_ptrs_.data();
  }

  // Publishes `fp` (and this rank's direct slot), waits until every rank has
  // entered, and compares fingerprints. Throws CollectiveMismatch, identically
  // on every rank, when they differ.
  void handshake(const Fingerprint& fp);

  void* send_buffer();
  void send_commit();
  const void* recv_buffer();
  void recv_commit();

  // Marks the communicator broken for every rank (idempotent) and returns the
  // message the caller should raise.
  std::string abort(const std::string& reason);
  bool aborted() const;

 private:
  ShmTransport(int rank, int world, std::shared_ptr<ShmSegment> segment,
               const TransportConfig& config);

  Header& header() const { return *static_cast<Header*>(segment_->data()); }
  RankControl& control(int r) const {
    return reinterpret_cast<RankControl*>(at(layout_.control_offset()))[r];
  }
  char* at(size_t offset) const { return static_cast<char*>(segment_->data()) + offset; }

  void publish(std::atomic<uint64_t>& word, uint64_t value, int owner);
  void wait_at_least(const std::atomic<uint64_t>& word, uint64_t target, int owner, int peer,
                     const char* waiting_for);
  [[noreturn]] void fail_timeout(int peer, const char* waiting_for);
  [[noreturn]] void fail_dead(int peer);
  [[noreturn]] void fail_aborted() const;
  std::string where() const;

  int rank_;
  int world_;
  int next_;
  int prev_;
  std::shared_ptr<ShmSegment> segment_;
  SegmentLayout layout_;
  TransportConfig config_;
  PeerWatch watch_;

  // Local mirrors of this rank's counters (this rank is their only writer).
  uint64_t arrived_ = 0;
  uint64_t sent_ = 0;
  uint64_t received_ = 0;

  std::vector<const void*> slot_ptrs_;  // direct_slots()'s answer, sized once
  const char* what_ = "collective";
  uint64_t deadline_ns_ = 0;
};

uint64_t monotonic_ns();

}  // namespace pycomm::core
