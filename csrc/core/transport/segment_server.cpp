// The segment server (segment_exchange.h): a rank's thread that hands the
// memfds it offers to the group's ranks that prove they may have them.
#include "segment_exchange.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "../errors.h"
#include "../thread_name.h"
#include "segment_wire.h"

namespace pycomm::core {

using namespace segment_wire;

namespace {

// Every byte is looked at whatever the first difference, so the time taken
// tells a guesser nothing about how much of the secret it has right.
bool same_secret(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= uint8_t(a[i] ^ b[i]);
  return diff == 0;
}

// Best effort: a client that has gone or stopped reading gets nothing, and
// learns it from the closed connection. Non-blocking, so the server thread
// cannot hang on a client that does not read.
void send_reply(int conn, uint32_t status, const std::string& reason, int fd) {
  Reply rep {};
  rep.magic = kReplyMagic;
  rep.status = status;
  std::memcpy(rep.reason, reason.data(), std::min(reason.size(), sizeof(rep.reason) - 1));
  struct iovec iov {&rep, sizeof(rep)};
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    std::memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  while (sendmsg(conn, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR) {
  }
}

}  // namespace

// ---- the server ----------------------------------------------------------------

// A connection accepted and not yet answered.
struct SegmentServer::Pending {
  int fd;
  uint64_t deadline_ns;
  size_t got = 0;
  Request req{};
};

SegmentServer::SegmentServer(const std::string& address, const GroupSecret& secret)
    : address_(address), secret_(secret) {
  struct sockaddr_un addr;
  const socklen_t len = abstract_addr(address, &addr);
  try {
    // Non-blocking: a connection that vanishes between poll and accept4 must
    // not block the thread in accept4, where the stop signal cannot reach it.
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_fd_ < 0) throw CommError("segment server " + address + ": socket: " + errno_text(errno));
    if (bind(listen_fd_, reinterpret_cast<struct sockaddr*>(&addr), len) != 0) {
      const int err = errno;
      throw CommError("segment server: cannot bind the abstract Unix socket " + address + ": " +
                      errno_text(err) +
                      (err == EADDRINUSE ? " (another socket holds it: its name is random, so someone "
                                           "took it on purpose)"
                                         : ""));
    }
    // Every peer of a large group may ask at once; the backlog holds them
    // until the thread accepts them.
    if (listen(listen_fd_, SOMAXCONN) != 0) {
      throw CommError("segment server " + address + ": listen: " + errno_text(errno));
    }
    stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ < 0) throw CommError("segment server " + address + ": eventfd: " + errno_text(errno));
    thread_ = std::thread([this] { serve(); });
  } catch (...) {
    close_fds();
    throw;
  }
}

SegmentServer::~SegmentServer() {
  const uint64_t one = 1;
  // Never drained, so the eventfd stays readable and every later poll of the
  // thread returns at once.
  while (::write(stop_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  thread_.join();
  close_fds();
}

void SegmentServer::close_fds() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  listen_fd_ = stop_fd_ = -1;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, o] : offered_) ::close(o.fd);
  offered_.clear();
}

void SegmentServer::admit_members(std::vector<Sha256Digest> digests) {
  std::lock_guard<std::mutex> lock(mu_);
  members_ = std::move(digests);
}

void SegmentServer::offer(uint64_t key, int fd, uint32_t uses) {
  // A duplicate: the caller keeps its own fd (and its segment) to close as it likes.
  const int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) {
    throw CommError("segment server " + address_ + ": cannot offer fd " + std::to_string(fd) +
                    " under key " + std::to_string(key) + ": " + errno_text(errno));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = offered_.try_emplace(key, Offer{dup, uses});
  if (!fresh) {
    ::close(it->second.fd);
    it->second = Offer{dup, uses};
  }
}

void SegmentServer::withdraw(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = offered_.find(key);
  if (it == offered_.end()) return;
  ::close(it->second.fd);
  offered_.erase(it);
}

size_t SegmentServer::offered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return offered_.size();
}

// One loop serves every connection side by side: the listening socket, each
// pending connection (with its own deadline), and the stop signal. The idle
// wait has no deadline of its own: it ends with the destructor's signal.
void SegmentServer::serve() {
  name_this_thread("pycomm-segsrv");
  std::vector<Pending> pending;
  std::vector<struct pollfd> fds;
  for (;;) {
    fds.assign({{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    uint64_t next_deadline = UINT64_MAX;
    for (const Pending& p : pending) {
      fds.push_back({p.fd, POLLIN, 0});
      next_deadline = std::min(next_deadline, p.deadline_ns);
    }
    const int ms = next_deadline == UINT64_MAX ? -1 : ms_until(next_deadline);
    if (poll(fds.data(), nfds_t(fds.size()), ms) < 0) {
      if (errno == EINTR || errno == ENOMEM) continue;
      break;  // EFAULT or EINVAL: a bug, not a state to wait out
    }
    if (fds[0].revents) break;
    // Connections that spoke (or hung up) first, then the deadlines, then
    // newcomers: a full house drops its oldest, which has had its time.
    std::vector<Pending> open;
    open.reserve(pending.size());
    const uint64_t now = monotonic_ns();
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      const bool done = fds[i + 2].revents ? read_request(p) : false;
      if (done || now >= p.deadline_ns) {
        ::close(p.fd);
      } else {
        open.push_back(p);
      }
    }
    pending.swap(open);
    if (fds[1].revents & POLLIN) accept_new(pending);
  }
  for (const Pending& p : pending) ::close(p.fd);
}

void SegmentServer::accept_new(std::vector<Pending>& pending) {
  for (int i = 0; i < int(kMaxPending); ++i) {  // bounded: the stop signal is looked at between rounds
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of fds or memory: the connection stays in the backlog, and poll
      // would report it again at once. Pause rather than spin, still stoppable.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        struct pollfd stop = {stop_fd_, POLLIN, 0};
        poll(&stop, 1, 10);
      }
      return;  // EAGAIN: none left; ECONNABORTED, EINTR: nothing to answer
    }
    // Abstract sockets have no file permissions: anyone in the network
    // namespace can connect, so the kernel's word on who connected is the
    // gate, before anything the stranger sent is read. It is told why (a
    // reply that cannot block) and dropped.
    const PeerUid client = peer_uid(fd);
    if (client.uid != long(geteuid())) {
      refused_.fetch_add(1);
      send_reply(fd, kRefused,
                 client.uid < 0 ? "cannot tell which user the client runs as (" + client.error + ")"
                                : "the client runs as uid " + std::to_string(client.uid) + ", not " +
                                      std::to_string(geteuid()),
                 -1);
      ::close(fd);
      continue;
    }
    if (pending.size() >= kMaxPending) {
      ::close(pending.front().fd);
      pending.erase(pending.begin());
    }
    pending.push_back(Pending{fd, monotonic_ns() + kRequestWaitNs});
  }
}

bool SegmentServer::read_request(Pending& p) {
  const ssize_t n = recv(p.fd, reinterpret_cast<char*>(&p.req) + p.got, sizeof(p.req) - p.got, 0);
  if (n == 0) return true;  // hung up before asking: nothing to answer, not counted
  if (n < 0) return !(errno == EINTR || errno == EAGAIN);
  p.got += size_t(n);
  if (p.got < sizeof(p.req)) return false;
  answer(p);
  return true;
}

void SegmentServer::answer(Pending& p) {
  const Request& req = p.req;
  std::string refusal;
  if (req.magic != kRequestMagic || req.version != kVersion) {
    refusal = "not a request of this pycomm (magic " + std::to_string(req.magic) + ", version " +
              std::to_string(req.version) + "; expected version " + std::to_string(kVersion) + ")";
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    // The session segment also goes to a rank that shows its token; every
    // other segment only to a rank that holds the session (and so the secret).
    bool member = same_secret(req.proof, secret_.data(), secret_.size());
    if (!member && req.key == kSessionKey && req.rank > 0 && size_t(req.rank) < members_.size()) {
      GroupSecret token;
      std::memcpy(token.data(), req.proof, token.size());
      const Sha256Digest d = token_digest(token);
      member = same_secret(d.data(), members_[size_t(req.rank)].data(), d.size());
    }
    auto it = offered_.find(req.key);
    if (!member) {
      refusal = req.key == kSessionKey && !members_.empty()
                    ? "wrong token for rank " + std::to_string(req.rank) +
                          " (not the one whose digest that rank published) and wrong group secret"
                    : "wrong group secret";
    } else if (it == offered_.end()) {
      refusal = "no segment offered under key " + std::to_string(req.key);
    } else {
      // Sent under the lock, so that withdraw() cannot close the fd mid-send;
      // the send does not block.
      send_reply(p.fd, kGranted, "", it->second.fd);
      if (it->second.uses_left != 0 && --it->second.uses_left == 0) {
        ::close(it->second.fd);
        offered_.erase(it);
      }
      return;
    }
  }
  refused_.fetch_add(1);
  send_reply(p.fd, kRefused, refusal, -1);
}

}  // namespace pycomm::core
