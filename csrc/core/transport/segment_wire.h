// What both ends of the segment exchange (segment_exchange.h) share: the
// request and the reply on the wire, an fd that closes itself, the abstract
// socket address and the peer's uid as the kernel reports it.
#pragma once

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "../errors.h"
#include "session.h"  // monotonic_ns

namespace pycomm::core::segment_wire {

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

inline std::string errno_text(int err) { return std::strerror(err); }

// sockaddr_un of an abstract name: sun_path[0] is NUL, the name follows, and
// the length, not a terminating NUL, says where it ends.
inline socklen_t abstract_addr(const std::string& address, struct sockaddr_un* addr) {
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

// The uid of the process at the other end of `sock`, as the kernel saw it at
// connect() (client) or listen() (server), or why the kernel will not say.
struct PeerUid {
  long uid = -1;
  std::string error;
};

inline PeerUid peer_uid(int sock) {
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return {-1, "SO_PEERCRED: " + errno_text(errno)};
  return {long(cred.uid), ""};
}

// Milliseconds to `deadline_ns` for poll(), rounded up so that a wait never
// ends just short of the deadline and spins.
inline int ms_until(uint64_t deadline_ns) {
  const uint64_t now = monotonic_ns();
  if (now >= deadline_ns) return 0;
  return int(std::min<uint64_t>((deadline_ns - now + 999'999) / 1'000'000, INT_MAX));
}

}  // namespace pycomm::core::segment_wire
