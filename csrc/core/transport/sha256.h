// SHA-256 (FIPS 180-4), for one purpose: a rank proves it is the rank that
// published a digest in the group's store by showing the token behind it
// (segment_exchange.h). The store is readable by any local process that
// reaches its port, so it may carry a digest, never the token itself.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace pycomm::core {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest sha256(const uint8_t* data, size_t bytes);

}  // namespace pycomm::core
