// Passing anonymous shared memory between the ranks of one host, with nothing
// named in /dev/shm.
//
// A rank that owns segments (ShmSegment::create_anonymous: a sealed memfd)
// offers them through a SegmentServer: a Unix socket in the abstract
// namespace, under a random name the rank binds at set-up, before it tells
// anyone the name (so nobody can take it first). A peer asks for a segment by
// its key with fetch_segment(), and gets its file descriptor (SCM_RIGHTS) if,
// and only if,
//   - the kernel says the peer runs as the same user (SO_PEERCRED), checked
//     as soon as the connection is accepted, before a byte of it is read, and
//   - it proves membership (compared in constant time): the group's secret,
//     which only ranks holding the session segment know; or, for the session
//     segment itself, the token of the rank it says it is, whose SHA-256
//     digest that rank published in the store (the store is readable by any
//     local process that reaches its port: it carries digests, never secrets).
// Anything else is refused, and the side that asked gets a CommError saying
// why; the server logs nothing and keeps serving. Connections are served side
// by side, each with a short deadline, so clients that connect and say
// nothing delay nobody. Abstract sockets belong to the network namespace, so
// two containers of one pod (one network namespace, separate PID namespaces)
// reach each other; the socket vanishes with the process, so a crash leaves
// nothing behind.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sha256.h"

namespace pycomm::core {

// 32 random bytes: the group's secret (made by rank 0, kept in the session
// segment, which only the group's ranks map), or a rank's token (made by the
// rank, never shown to anyone but rank 0's server).
using GroupSecret = std::array<uint8_t, 32>;
GroupSecret new_group_secret();
std::string secret_to_hex(const GroupSecret& s);
GroupSecret secret_from_hex(const std::string& hex);  // InvalidArgument if malformed
// What a rank publishes of its token: its SHA-256 digest.
Sha256Digest token_digest(const GroupSecret& token);
Sha256Digest digest_from_hex(const std::string& hex);  // InvalidArgument if malformed

// The abstract socket name of the server with id `id` (a hex id, e.g. from
// new_group_id(): 128 random bits). Without the leading NUL.
std::string server_address(const std::string& id);
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
  // Binds the address, listens and starts the thread that answers. Throws
  // CommError if the address is taken (never by chance: the name is random).
  SegmentServer(const std::string& address, const GroupSecret& secret);
  // A client has this long to send its request once connected; pending
  // requests are served side by side, at most kMaxPending at once (the
  // oldest is dropped to make room: a request of the group takes
  // microseconds, so only a flood of silent clients is ever dropped).
  static constexpr uint64_t kRequestWaitNs = 1'000'000'000;
  static constexpr size_t kMaxPending = 64;
  ~SegmentServer();  // stops the thread, closes the socket and every offered fd
  SegmentServer(const SegmentServer&) = delete;
  SegmentServer& operator=(const SegmentServer&) = delete;

  // Admits a request for the session segment (kSessionKey) from rank r when
  // it shows the token whose digest is digests[r] (rank 0's entry is unused).
  void admit_members(std::vector<Sha256Digest> digests);
  // Offers a duplicate of `fd` under `key` (replacing any earlier one), for
  // `uses` grants (0: until withdrawn): a channel made for one peer is
  // withdrawn once that peer took it.
  void offer(uint64_t key, int fd, uint32_t uses = 0);
  void withdraw(uint64_t key);
  // Requests refused so far (a wrong secret or token, another user, an unknown key).
  uint64_t refused() const { return refused_.load(); }
  // Keys offered now (withdrawn and used-up ones are gone).
  size_t offered() const;
  const std::string& address() const { return address_; }

 private:
  struct Pending;
  struct Offer {
    int fd;
    uint32_t uses_left;  // 0: unlimited
  };
  void serve();
  void accept_new(std::vector<Pending>& pending);
  bool read_request(Pending& p);  // true once the connection is done with
  void answer(Pending& p);
  void close_fds();

  std::string address_;
  GroupSecret secret_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd: written by the destructor to end serve()
  mutable std::mutex mu_;
  std::map<uint64_t, Offer> offered_;
  std::vector<Sha256Digest> members_;
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

// Asks the server at `address` for `key`, as rank `rank`, showing `proof`
// (the group secret, or for kSessionKey this rank's token). Returns the fd (close-on-exec, the
// caller owns it; ShmSegment::from_fd checks and maps it). Throws CommError
// when the server refuses (its reason in the message: "refused by the peer:
// wrong group secret") or when there is no server at `address` (ECONNREFUSED:
// "no server at <address>"), at once: pycomm offers a segment before it tells
// anyone where to ask, so a missing server is one whose process exited or
// closed the group, and the caller, who watches the peer's pid, says which.
// CommTimeout at deadline_ns (monotonic_ns() clock) when the server does not
// answer (a stopped process). The proof goes only to a server that
// runs as this process's user (SO_PEERCRED), never to one squatting the
// address. `who` starts the message ("rank 3: fetching rank 0's session segment").
// `still_waiting`, if given, runs every few milliseconds while the server has
// not answered and may throw to give up early (a peer seen dead; a process
// forked from the server's keeps its socket open, so a dead rank's address can
// still take a connection that nobody answers).
int fetch_segment(const std::string& address, const GroupSecret& proof, uint64_t key, int rank,
                  uint64_t deadline_ns, const std::string& who,
                  const std::function<void()>& still_waiting = {});

}  // namespace pycomm::core
