// A session: everything the ranks of one host share that is not bytes.
//
//   handshake(fp)   every rank declares the collective it entered; all wait for
//                   all; a disagreement raises CollectiveMismatch, identically
//                   on every rank, before any data moves;
//   begin()         starts a collective's deadline;
//   wait_at_least() the one wait policy: spin briefly, then yield, then sleep
//                   on a futex; fails with CommTimeout at the deadline, when a
//                   peer process exits (pidfd watch), or when another rank has
//                   aborted the session;
//   publish()       a store that wakes the sleepers of that word, if any.
//
// A session lives in host shared memory and knows nothing of how bytes move:
// a data path (shm_data_path.h, the only one so far) takes a region of its
// segment, and uses wait_at_least/publish for its flags. Nothing in it is
// specific to CPU ranks, so a GPU data path can use it as it is.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../collective.h"
#include "peer_watch.h"
#include "segment_exchange.h"
#include "session_layout.h"
#include "shm_segment.h"

namespace pycomm::core {

struct WaitPolicy {
  double timeout_s = 300.0;
  // Busy-wait this long before yielding, then yield this long before sleeping:
  // long enough to catch a peer arriving at once, short enough not to starve
  // a peer that shares the core.
  double spin_us = 20.0;
  // The spin of a wait inside a stream (a ring link's next buffer), where the
  // peer is known to be there and busy filling it (settings.h says why longer).
  double stream_spin_us = 64.0;
  double yield_us = 200.0;
};

// How a group's segments travel between its ranks, agreed by all of them at
// set-up (pycomm/rendezvous.py):
//   memfd  anonymous memory, its descriptor passed over an abstract Unix socket
//          to a peer that proves it belongs to the group (segment_exchange.h):
//          nothing is ever named anywhere, so a crash leaves nothing behind;
//   posix  a file in shm_dir() (/dev/shm, or $PYCOMM_SHM_DIR), unlinked once
//          mapped: the fallback where memfds or abstract sockets are refused.
//          A file is taken only if this user made it and nobody else may
//          open it (ShmSegment::open), but another process of the same user
//          can open it while it is named: see docs/failures.md.
enum class ShmTransport : uint32_t { kPosix = 1, kMemfd = 2 };
const char* transport_name(ShmTransport t);

// Where a group's session segment is found, and how a rank proves it may map it.
struct SegmentPlace {
  ShmTransport transport = ShmTransport::kPosix;
  std::string name;    // posix: the session segment's name in shm_dir()
  std::string server;  // memfd: the id of rank 0's server (server_address())
  // memfd, attaching: this rank's token, whose digest it published (rank 0's
  // server asks for it). Never leaves this process but to that server.
  GroupSecret token{};
  // memfd, creating: each rank's token digest, in rank order (rank 0's unused).
  std::vector<Sha256Digest> members;

  static SegmentPlace named(const std::string& name) { return {ShmTransport::kPosix, name, "", {}, {}}; }
  static SegmentPlace served(const std::string& server) { return {ShmTransport::kMemfd, "", server, {}, {}}; }
  // As the store carries it: "posix:<name>" or "memfd:<server id>" (no
  // token, no digest: those travel apart).
  std::string to_string() const;
  static SegmentPlace parse(const std::string& text);  // InvalidArgument if malformed
};

// What the creator reserves for the data path behind the session's control.
struct DataRegion {
  size_t bytes = 0;
  uint64_t params[kDataParams] = {};
};

class Session {
 public:
  // Rank 0 creates the segment (posix: under a fresh name, see
  // new_segment_name(); memfd: anonymous, offered by its server to the ranks
  // whose tokens match place.members); the others attach to the place it
  // shares through the store. With memfd, every rank binds its own server
  // here, before it counts itself attached. Call start() once every rank has
  // attached, then unlink_name().
  static std::unique_ptr<Session> create(int rank, int world, const SegmentPlace& place,
                                         const WaitPolicy& policy, const DataRegion& data);
  static std::unique_ptr<Session> attach(int rank, int world, const SegmentPlace& place,
                                         const WaitPolicy& policy);
  // The size of the session segment of `world` ranks with `data` behind it.
  static size_t segment_bytes(int world, const DataRegion& data);
  // A named (posix) segment: what the native tests use.
  static std::unique_ptr<Session> create(int rank, int world, const std::string& name,
                                         const WaitPolicy& policy, const DataRegion& data) {
    return create(rank, world, SegmentPlace::named(name), policy, data);
  }
  // Another rank in this process, sharing `creator`'s mapping (and, memfd,
  // with a server of its own). Native tests run ranks as threads this way, so
  // ThreadSanitizer sees every rank's accesses at the same addresses.
  static std::unique_ptr<Session> join(int rank, const Session& creator);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Reads every rank's pid and starts watching the peers. Fails if a rank has
  // not attached.
  void start();
  // Makes the session segment unobtainable to anyone else: its name is
  // removed (posix), or its server stops offering it (memfd).
  void unlink_name();

  int rank() const { return rank_; }
  int world() const { return world_; }
  const std::string& name() const { return segment_->name(); }
  // The wait policy, with the timeout as it is now (set_timeout).
  WaitPolicy policy() const {
    WaitPolicy p = policy_;
    p.timeout_s = timeout_s();
    return p;
  }
  // The timeout of what begins from now on (a collective, a point-to-point
  // operation, a segment fetch); what runs keeps its deadline. Any thread:
  // torch's setTimeout (torchft sets it on every quorum) may come from one
  // while another waits. Each rank's own: a rank that gives up first aborts
  // the session, so the others fail then too.
  void set_timeout(double seconds) { timeout_s_.store(seconds, std::memory_order_relaxed); }
  double timeout_s() const { return timeout_s_.load(std::memory_order_relaxed); }
  ShmTransport transport() const { return ShmTransport(header().transport); }

  // The group's other segments (point-to-point channels), each made by one
  // rank for one peer. make_segment() creates `bytes` of zeroed shared memory
  // and offers it under `key` to one taker (memfd: through this rank's
  // server, which withdraws it once taken; posix: under a name derived from
  // the group, this rank's pid and the key); fetch_segment() maps what
  // `owner` offered under `key`, within the session's timeout. Both throw
  // CommError naming the ranks. The caller keeps the segment: a posix one
  // stays named until the peer took it (fetch unlinks it) or its maker unlinks it.
  ShmSegment make_segment(uint64_t key, size_t bytes);
  ShmSegment fetch_segment(int owner, uint64_t key);
  // memfd only: offers a duplicate of `fd` (a segment made before the group
  // was known: symmetric memory's) under `key`, for `uses` grants (0: until
  // withdraw_segment(key)). CommError on a posix session, whose segments are
  // found by name instead.
  void offer_segment(uint64_t key, int fd, uint32_t uses = 0);
  void withdraw_segment(uint64_t key);

  // The data path's region of the segment and what the creator recorded of it.
  char* data_region() const { return at(header().data_offset); }
  size_t data_bytes() const { return header().data_bytes; }
  const uint64_t* data_params() const { return header().data_params; }

  // Starts a collective: sets its deadline, fails at once if the session was
  // aborted. `what` names the collective in errors (a string literal).
  void begin(const char* what);

  // Handshakes this rank has entered so far; the next one is entered() + 1.
  uint64_t entered() const { return arrived_; }

  // Publishes `fp` (and whatever the data path wrote for handshake entered()+1),
  // waits until every rank has entered, and compares fingerprints. Throws
  // CollectiveMismatch, identically on every rank, when they differ.
  void handshake(const Fingerprint& fp);

  // `word` is written by rank `writer` alone. publish() stores and wakes its
  // sleepers; wait_at_least() returns once word >= target, or throws
  // CommTimeout naming `peer` and what it was `waiting_for`. `mid_stream`: the
  // writer is inside the same collective, producing what is waited for (the
  // policy's stream_spin_us), rather than still on its way to it (spin_us).
  void publish(std::atomic<uint64_t>& word, uint64_t value, int writer);
  void wait_at_least(const std::atomic<uint64_t>& word, uint64_t target, int writer, int peer,
                     const char* waiting_for, bool mid_stream = false);

  // Fails as wait_at_least would when the session was aborted or a peer
  // exited. For waits that happen elsewhere (a GPU kernel's, polled by its
  // host thread), which keep their own deadline.
  void check_alive();
  // What is left of the current collective's time (0 once it is over).
  uint64_t remaining_ns() const;

  // Throws CollectiveMismatch with `message` (used by collectives that check
  // what the handshake cannot, e.g. all-to-all split sizes, on every rank).
  [[noreturn]] void fail_mismatch(const std::string& message) const;

  // Marks the session broken for every rank (idempotent) and returns the
  // message the caller should raise. dead_peer: the rank whose exit is the
  // reason (every rank then raises PeerDied), or -1.
  std::string abort(const std::string& reason, int dead_peer = -1);
  bool aborted() const;
  // What a call named `what` raises once the session is aborted: the reason
  // the aborting rank wrote.
  std::string aborted_message(const std::string& what) const;
  // That error: PeerDied when a peer's exit aborted the session, else CommTimeout.
  std::exception_ptr aborted_error(const std::string& what) const;

  // For waits that are not a collective's (point-to-point keeps a deadline per
  // operation): the lowest rank whose process has exited, or -1, and its pid.
  // Safe to call from any thread once start() returned.
  int first_dead_peer() const { return watch_.first_dead(); }
  // Rank r's process as this rank can name it: 0 for one in another PID
  // namespace (its number means another process here).
  pid_t pid_of(int r) const { return watch_.pid_of(r); }
  // Rank r's probe line (cross_memory.h): this rank writes its own only.
  ProbeLine& probe_line(int r) const { return control(r).probe; }

  // Raises PeerDied naming `peer` after aborting the session with that reason,
  // as a wait that sees the peer's process gone does.
  [[noreturn]] void fail_dead(int peer);

 private:
  Session(int rank, int world, std::shared_ptr<ShmSegment> segment, const WaitPolicy& policy);
  // The last step of create/attach/join: binds this rank's server (memfd,
  // under `server_id`, or a fresh id) and counts the rank in.
  void count_in(const std::string& server_id = "");

  Header& header() const { return *static_cast<Header*>(segment_->data()); }
  RankControl& control(int r) const {
    return reinterpret_cast<RankControl*>(at(control_offset()))[r];
  }
  char* at(size_t offset) const { return static_cast<char*>(segment_->data()) + offset; }

  [[noreturn]] void fail_timeout(int peer, const char* waiting_for);
  [[noreturn]] void fail_aborted() const;
  std::string where() const;

  // posix: the name under which `owner` offers `key`.
  std::string segment_name(int owner, uint64_t key) const;
  // memfd: the address of `owner`'s server, as it wrote it in its owner line.
  std::string server_of(int owner) const;
  GroupSecret secret() const;

  int rank_;
  int world_;
  std::shared_ptr<ShmSegment> segment_;
  WaitPolicy policy_;  // its timeout_s is the one set up with: timeout_s_ is the one in force
  std::atomic<double> timeout_s_;
  PeerWatch watch_;
  // memfd: what this rank offers its peers, bound at set-up (rank 0's offers
  // the session segment from create() until unlink_name()).
  std::mutex server_mu_;
  std::unique_ptr<SegmentServer> server_;

  uint64_t arrived_ = 0;  // local mirror of control(rank_).own.arrived
  const char* what_ = "collective";
  uint64_t deadline_ns_ = 0;
};

uint64_t monotonic_ns();

}  // namespace pycomm::core
