// What each setting may be: the bounds column of the settings table
// (settings.h), and the limits its rows name. A setting is read from the
// environment, an argument or a config dict, so anyone who can set a variable
// for a rank chooses it; every size the group derives from the settings (its
// segment: buffers times their size times the ranks) must stay far below 2^64
// and within what a host could map, and every wait must have a deadline.
#pragma once

#include <cstddef>

namespace pycomm::core {

// Inclusive, in the setting's own unit (bytes, a count, seconds, microseconds;
// 0 or 1 for a switch). A choice has none: its unit lists what it may be.
struct SettingBounds {
  double lo = 0;
  double hi = 0;
};
constexpr SettingBounds between(double lo, double hi) { return {lo, hi}; }
constexpr SettingBounds kChoice{};

// One buffer a setting sizes (a slot, a link's buffer, a frame, a piece, a
// device buffer): at most 4 GiB. A rank's part of the segment is a few of
// them times at most kMaxDepth, 4 TiB at worst, so a group's segment stays far
// below 2^64 for any number of ranks a host holds (and its arithmetic is
// checked besides: checked_size.h); what the host cannot map is refused when
// the segment is made.
constexpr double kMaxBufferBytes = double(size_t(4) << 30);
// The data paths' least buffer: one line (shm_data_path.cpp, p2p_channels.cpp).
constexpr double kMinBufferBytes = 64;
// A threshold is compared with a message's size and never allocated: 1 PiB
// is beyond any message, so it still means "always".
constexpr double kMaxThresholdBytes = double(size_t(1) << 50);
// Buffers a link, frames a channel: how far a sender may run ahead.
constexpr double kMaxDepth = 1024;
// A team of threads needs no more than Linux's most CPUs (NR_CPUS), whatever
// the host: the default, the rank's cores, stays within it.
constexpr double kMaxThreads = 8192;
// A deadline is now + timeout in nanoseconds, in 64 bits: 1e9 s (31 years)
// leaves room. 0, a negative or nan would be a deadline that has passed or
// never comes; under a millisecond no group could even set up.
constexpr double kMinTimeoutS = 1e-3;
constexpr double kMaxTimeoutS = 1e9;
// A spin or a yield longer than a second is a stall, not a wait policy.
constexpr double kMaxWaitUs = 1e6;

}  // namespace pycomm::core
