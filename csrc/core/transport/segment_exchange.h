// Passing anonymous shared memory between the ranks of one host, with nothing
// named in /dev/shm.
//
// A rank that owns segments (ShmSegment::create_anonymous: a sealed memfd)
// offers them through a SegmentServer: a Unix socket in the abstract
// namespace, named from the group's unique id and the rank, served by one
// thread. A peer asks for a segment by its key with fetch_segment(), and gets
// its file descriptor (SCM_RIGHTS) if, and only if,
//   - the kernel says the peer runs as the same user (SO_PEERCRED), and
//   - it presents the group's secret (compared in constant time).
// Anything else is refused, and the side that asked gets a CommError saying
// why; the server logs nothing and keeps serving. Abstract sockets belong to
// the network namespace, so two containers of one pod (one network namespace,
// separate PID namespaces) reach each other; the socket vanishes with the
// process, so a crash leaves nothing behind.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace pycomm::core {

// 32 random bytes that only the group's ranks know (shared through the
// group's store at set-up, and kept in the group's shared memory afterwards).
using GroupSecret = std::array<uint8_t, 32>;
GroupSecret new_group_secret();
std::string secret_to_hex(const GroupSecret& s);
GroupSecret secret_from_hex(const std::string& hex);  // InvalidArgument if malformed

// The abstract socket name of `rank`'s server in group `group_id` (a hex id,
// unique per group, e.g. from new_group_id()). Without the leading NUL.
std::string server_address(const std::string& group_id, int rank);
std::string new_group_id();

// Keys of what a server offers.
constexpr uint64_t kSessionKey = 0;  // the session segment (rank 0's)
// The point-to-point channel from the server's rank to `to`.
inline uint64_t channel_key(int to) { return 1 + uint64_t(to); }
// The n-th symmetric-memory buffer rendezvoused on the group (every rank
// counts its rendezvous calls alike, as they are collective).
inline uint64_t symmetric_key(uint64_t n) { return (uint64_t(1) << 48) + n; }

class SegmentServer {
 public:
  // Binds the address and starts serving. Throws CommError if it is taken
  // (another group with this id on this network namespace: never by chance).
  // The thread answers one connection at a time; a client that connects and
  // says nothing is dropped after kRequestWaitNs, so it delays the others at
  // most that long.
  SegmentServer(const std::string& address, const GroupSecret& secret);
  static constexpr uint64_t kRequestWaitNs = 2'000'000'000;
  ~SegmentServer();  // stops the thread, closes the socket and every offered fd
  SegmentServer(const SegmentServer&) = delete;
  SegmentServer& operator=(const SegmentServer&) = delete;

  // Offers a duplicate of `fd` under `key` (replacing any earlier one).
  void offer(uint64_t key, int fd);
  void withdraw(uint64_t key);
  // Requests refused so far (a wrong secret, another user, an unknown key).
  uint64_t refused() const { return refused_.load(); }
  const std::string& address() const { return address_; }

 private:
  void serve();
  void answer(int conn);
  void close_fds();

  std::string address_;
  GroupSecret secret_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd: written by the destructor to end serve()
  std::mutex mu_;
  std::map<uint64_t, int> offered_;
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

// Asks the server at `address` for `key`. Returns the fd (close-on-exec, the
// caller owns it; ShmSegment::from_fd checks and maps it). Throws CommError
// when the server refuses (its reason in the message: "refused by the peer:
// wrong group secret") or when there is no server at `address` (ECONNREFUSED:
// "no server at <address>"), at once: pycomm offers a segment before it tells
// anyone where to ask, so a missing server is one whose process exited or
// closed the group, and the caller, who watches the peer's pid, says which.
// CommTimeout at deadline_ns (monotonic_ns() clock) when the server does not
// answer (a stopped process). The secret goes only to a server that
// runs as this process's user (SO_PEERCRED), never to one squatting the
// address. `who` starts the message ("rank 3: fetching rank 0's session segment").
// `still_waiting`, if given, runs every few milliseconds while the server has
// not answered and may throw to give up early (a peer seen dead; a process
// forked from the server's keeps its socket open, so a dead rank's address can
// still take a connection that nobody answers).
int fetch_segment(const std::string& address, const GroupSecret& secret, uint64_t key,
                  uint64_t deadline_ns, const std::string& who,
                  const std::function<void()>& still_waiting = {});

}  // namespace pycomm::core
