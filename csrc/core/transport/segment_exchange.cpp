#include "segment_exchange.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstddef>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "../errors.h"
#include "../thread_name.h"
#include "session.h"

namespace pycomm::core {
namespace {

// The wire: one request, one reply, on a connection of its own. Both ends are
// ranks of one group, hence one build; magic and version still turn a stray
// client (or an older pycomm's) into a clear refusal instead of a misread.
constexpr uint32_t kRequestMagic = 0x70637351;  // "pcsQ"
constexpr uint32_t kReplyMagic = 0x70637341;    // "pcsA"
constexpr uint32_t kVersion = 2;  // 2: the asking rank, and tokens for the session

struct Request {
  uint32_t magic;
  uint32_t version;
  uint8_t proof[32];  // the group secret, or (session segment) the rank's token
  uint64_t key;
  int32_t rank;       // who asks
  uint32_t reserved;
};
static_assert(sizeof(Request) == 56, "the request's layout is the protocol");

enum : uint32_t { kGranted = 0, kRefused = 1 };

struct Reply {
  uint32_t magic;
  uint32_t status;    // kGranted: the fd rides along (SCM_RIGHTS); kRefused: reason says why
  char reason[120];   // NUL-padded
};
static_assert(sizeof(Reply) == 128, "the reply's layout is the protocol");

// A file descriptor closed when it goes out of scope, so that every throw
// below leaves no fd behind.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

std::string errno_text(int err) { return std::strerror(err); }

// sockaddr_un of an abstract name: sun_path[0] is NUL, the name follows, and
// the length, not a terminating NUL, says where it ends.
socklen_t abstract_addr(const std::string& address, struct sockaddr_un* addr) {
  if (address.empty() || address.size() + 1 > sizeof(addr->sun_path)) {
    throw InvalidArgument("segment exchange: address must be 1 to " +
                          std::to_string(sizeof(addr->sun_path) - 1) + " bytes, got " +
                          std::to_string(address.size()));
  }
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path + 1, address.data(), address.size());
  return socklen_t(offsetof(struct sockaddr_un, sun_path) + 1 + address.size());
}

// Milliseconds to `deadline_ns` for poll(), rounded up so that a wait never
// ends just short of the deadline and spins.
int ms_until(uint64_t deadline_ns) {
  const uint64_t now = monotonic_ns();
  if (now >= deadline_ns) return 0;
  return int(std::min<uint64_t>((deadline_ns - now + 999'999) / 1'000'000, INT_MAX));
}

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

void random_bytes(uint8_t* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(out + got, n - got, 0);
    if (r > 0) {
      got += size_t(r);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // ENOSYS (an old kernel, or a sandbox that filters it): the device below
    }
  }
  if (got == n) return;
  UniqueFd dev(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (dev.get() < 0) throw CommError("cannot read random bytes: getrandom and /dev/urandom both fail");
  while (got < n) {
    const ssize_t r = ::read(dev.get(), out + got, n - got);
    if (r > 0) {
      got += size_t(r);
    } else if (!(r < 0 && errno == EINTR)) {
      throw CommError("cannot read random bytes from /dev/urandom: " + errno_text(r < 0 ? errno : EIO));
    }
  }
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Every byte is looked at whatever the first difference, so the time taken
// tells a guesser nothing about how much of the secret it has right.
bool same_secret(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= uint8_t(a[i] ^ b[i]);
  return diff == 0;
}

// The uid of the process at the other end of `sock`, as the kernel saw it at
// connect() (client) or listen() (server), or why the kernel will not say.
struct PeerUid {
  long uid = -1;
  std::string error;
};

PeerUid peer_uid(int sock) {
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return {-1, "SO_PEERCRED: " + errno_text(errno)};
  return {long(cred.uid), ""};
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

// ---- secrets and names -------------------------------------------------------

GroupSecret new_group_secret() {
  GroupSecret s;
  random_bytes(s.data(), s.size());
  return s;
}

std::string secret_to_hex(const GroupSecret& s) { return to_hex(s.data(), s.size()); }

GroupSecret secret_from_hex(const std::string& hex) {
  GroupSecret s;
  if (hex.size() != 2 * s.size()) {
    throw InvalidArgument("secret_from_hex: expected " + std::to_string(2 * s.size()) +
                          " hex digits, got " + std::to_string(hex.size()) + " characters");
  }
  for (size_t i = 0; i < s.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      throw InvalidArgument("secret_from_hex: not a hex digit at position " +
                            std::to_string(hi < 0 ? 2 * i : 2 * i + 1));
    }
    s[i] = uint8_t(hi << 4 | lo);
  }
  return s;
}

Sha256Digest token_digest(const GroupSecret& token) { return sha256(token.data(), token.size()); }

Sha256Digest digest_from_hex(const std::string& hex) {
  const GroupSecret bytes = secret_from_hex(hex);  // the same 32 bytes in hex
  Sha256Digest d;
  std::memcpy(d.data(), bytes.data(), d.size());
  return d;
}

std::string new_group_id() {
  uint8_t id[16];  // 128 bits: two groups never meet by chance
  random_bytes(id, sizeof(id));
  return to_hex(id, sizeof(id));
}

std::string server_address(const std::string& id) {
  const bool plain = !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
  if (!plain) {
    throw InvalidArgument("server_address: id must be 1 to 64 letters, digits, '-' or '_', got '" +
                          id.substr(0, 80) + "'");
  }
  // No uid in the name: the id alone is unique, and a name another user
  // took on purpose is caught by the uid checks on both ends.
  return "pycomm-" + id;
}

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
