// The segment exchange's client (segment_exchange.h): fetch_segment, which
// asks a rank's server for a memfd; the server is segment_server.cpp, the
// secrets and names group_secrets.cpp.
#include "segment_exchange.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <string>

#include "../errors.h"
#include "segment_wire.h"

namespace pycomm::core {

using namespace segment_wire;

namespace {

// How often a client's wait asks `still_waiting` whether to go on.
constexpr int kCheckEveryMs = 10;

// Waits until `fd` has `events`, or the deadline. With `stop_fd` >= 0, also
// until that is readable. Returns 1 when fd is ready (or hung up: the read or
// write says how), 0 at the deadline, -1 when stopped. `still_waiting`, if
// given, runs every kCheckEveryMs and may throw to end the wait.
int wait_for(int fd, short events, uint64_t deadline_ns, int stop_fd = -1,
             const std::function<void()>* still_waiting = nullptr) {
  for (;;) {
    struct pollfd fds[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int ms = still_waiting ? std::min(ms_until(deadline_ns), kCheckEveryMs) : ms_until(deadline_ns);
    const int n = poll(fds, stop_fd >= 0 ? 2 : 1, ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CommError("segment exchange: poll failed: " + errno_text(errno));
    }
    if (stop_fd >= 0 && fds[1].revents) return -1;
    if (fds[0].revents) return 1;
    if (monotonic_ns() >= deadline_ns) return 0;
    if (still_waiting) (*still_waiting)();
  }
}

}  // namespace

// ---- the client ----------------------------------------------------------------

namespace {

// Connects, trying again while the server's backlog is full (EAGAIN), until
// the deadline. Nobody listening (ECONNREFUSED) is final (see the header).
UniqueFd connect_by(const std::string& address, uint64_t deadline_ns, const std::string& who,
                    const std::function<void()>* still_waiting) {
  struct sockaddr_un addr;
  const socklen_t len = abstract_addr(address, &addr);
  uint64_t pause_ns = 1'000'000;
  for (;;) {
    UniqueFd sock(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (sock.get() < 0) throw CommError(who + ": socket: " + errno_text(errno));
    int err = connect(sock.get(), reinterpret_cast<struct sockaddr*>(&addr), len) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      if (wait_for(sock.get(), POLLOUT, deadline_ns, -1, still_waiting) == 1) {
        socklen_t elen = sizeof(err);
        if (getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
      } else {
        err = ETIMEDOUT;
      }
    }
    if (err == 0) return sock;
    if (err == ECONNREFUSED || err == ENOENT) {  // ENOENT: what a path socket would say
      throw CommError(who + ": no server at " + address + " (" + errno_text(err) +
                      "): its rank has exited or closed the group");
    }
    if (err != EAGAIN && err != EINTR && err != ETIMEDOUT) {
      throw CommError(who + ": cannot connect to the segment server at " + address + ": " + errno_text(err));
    }
    const uint64_t now = monotonic_ns();
    if (now >= deadline_ns) {
      throw CommTimeout(who + ": the segment server at " + address + " took no connection (" +
                        errno_text(err) + ") before the deadline");
    }
    const uint64_t pause = std::min(pause_ns, deadline_ns - now);
    struct timespec ts {time_t(pause / 1'000'000'000), long(pause % 1'000'000'000)};
    nanosleep(&ts, nullptr);  // EINTR: an early retry, no harm
    pause_ns = std::min<uint64_t>(pause_ns * 2, 50'000'000);
  }
}

}  // namespace

int fetch_segment(const std::string& address, const GroupSecret& proof, uint64_t key, int rank,
                  uint64_t deadline_ns, const std::string& who,
                  const std::function<void()>& still_waiting) {
  const std::function<void()>* check = still_waiting ? &still_waiting : nullptr;
  UniqueFd sock = connect_by(address, deadline_ns, who, check);
  const PeerUid server = peer_uid(sock.get());
  if (server.uid != long(geteuid())) {
    throw CommError(who + ": the segment server at " + address +
                    (server.uid < 0 ? " cannot be identified (" + server.error + ")"
                                    : " runs as uid " + std::to_string(server.uid) + ", not " +
                                          std::to_string(geteuid())) +
                    "; the group secret is not sent to it");
  }

  Request req {};
  req.magic = kRequestMagic;
  req.version = kVersion;
  std::memcpy(req.proof, proof.data(), proof.size());
  req.key = key;
  req.rank = int32_t(rank);
  size_t sent = 0;
  while (sent < sizeof(req)) {
    const ssize_t n = send(sock.get(), reinterpret_cast<const char*>(&req) + sent, sizeof(req) - sent,
                           MSG_NOSIGNAL);
    if (n >= 0) {
      sent += size_t(n);
    } else if (errno == EAGAIN || errno == EINTR) {
      if (errno == EAGAIN && wait_for(sock.get(), POLLOUT, deadline_ns, -1, check) == 0) {
        throw CommTimeout(who + ": the segment server at " + address + " took no request before the deadline");
      }
    } else {
      throw CommError(who + ": the segment server at " + address + " closed the connection (" +
                      errno_text(errno) + ")");
    }
  }

  // The reply, and the fds that ride along with its first bytes. Room for
  // more than one, so that a wrong count is seen and nothing stays open.
  Reply rep {};
  size_t got = 0;
  std::vector<UniqueFd> fds;
  bool truncated = false;
  while (got < sizeof(rep)) {
    if (wait_for(sock.get(), POLLIN, deadline_ns, -1, check) == 0) {
      throw CommTimeout(who + ": the segment server at " + address + " did not answer before the deadline");
    }
    struct iovec iov {reinterpret_cast<char*>(&rep) + got, sizeof(rep) - got};
    alignas(struct cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    struct msghdr msg {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(sock.get(), &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw CommError(who + ": reading the answer of the segment server at " + address + ": " +
                      errno_text(errno));
    }
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(fd);
      }
    }
    if (msg.msg_flags & MSG_CTRUNC) truncated = true;
    if (n == 0) {
      throw CommError(who + ": the segment server at " + address +
                      " closed the connection without answering (it may be stopping)");
    }
    got += size_t(n);
  }

  if (rep.magic != kReplyMagic) {
    throw CommError(who + ": the segment server at " + address + " answered in another protocol");
  }
  if (rep.status != kGranted) {
    const std::string reason(rep.reason, strnlen(rep.reason, sizeof(rep.reason)));
    throw CommError(who + ": refused by the peer: " + reason);
  }
  if (fds.size() != 1 || truncated) {
    throw CommError(who + ": the segment server at " + address + " granted the request with " +
                    std::to_string(fds.size()) + " file descriptors, not 1" +
                    (truncated ? " (some lost: is this process out of file descriptors?)" : ""));
  }
  return fds[0].release();
}

}  // namespace pycomm::core
