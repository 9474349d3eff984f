// The segment exchange's secrets and names (segment_exchange.h): group
// secrets and rank tokens from the kernel's randomness, their hex and digests,
// group ids and the servers' abstract addresses.
#include "segment_exchange.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <string>

#include "../errors.h"
#include "segment_wire.h"

namespace pycomm::core {

using namespace segment_wire;

namespace {

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

}  // namespace pycomm::core
