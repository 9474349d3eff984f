// The layout of a session's shared-memory segment.
//
//   Header | RankControl[world] | data region (owned by a data path)
//
// The session's part carries what is not bytes: the handshake with its
// fingerprints, the pids the peer watch uses, the abort flag and the sleepers
// counters. The data region's size and parameters are recorded in the header
// by the creator, so that attaching ranks lay out the same data path.
//
// Every control line has exactly one writing rank (sleepers aside), so ranks
// never write the same cache line on the hot path. Lines are 128 bytes because
// adjacent-line prefetch couples pairs of 64-byte lines.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "../collective.h"

namespace pycomm::core {

// Atomics shared between processes must not hide a lock in the process that
// owns them: true for these on x86-64 and aarch64 alike.
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<int32_t>::is_always_lock_free,
              "shared-memory counters must be lock-free atomics");

constexpr size_t kLine = 128;
constexpr uint64_t kSegmentMagic = 0x31304d4d4f435950ULL;  // "PYCOMM01"
// 2: fingerprints gained root and divisor; data paths moved out of the session.
// 3: the header says whether a peer's exit caused the abort (abort_dead).
// 4: the header holds the group's transport, id and secret (segment_exchange.h).
// 5: fingerprints gained place (symmetric memory).
// 6: each rank's probe line (cross-memory attach, cross_memory.h).
// 7: each rank's segment server id in a line of its own; the secret is rank 0's alone.
constexpr uint32_t kLayoutVersion = 7;
constexpr int kDataParams = 8;

// Written by the owning rank only.
struct alignas(kLine) OwnerLine {
  // Handshakes this rank has entered. Invariant: when a peer acquire-loads
  // arrived >= k, fingerprint[k & 1] (and whatever the data path published for
  // handshake k, e.g. its slot k & 1) hold handshake k's values, and stay so
  // until the owner has seen every peer arrive at k+1.
  std::atomic<uint64_t> arrived{0};
  std::atomic<int32_t> pid{0};
  // The PID namespace `pid` is a number of (its /proc/self/ns/pid inode): a
  // peer watches it only from the same namespace (containers of one pod share
  // the network, so the memfd transport, but not always the PIDs).
  std::atomic<uint64_t> pid_ns{0};
  Fingerprint fingerprint[2];
};
static_assert(sizeof(OwnerLine) == kLine, "a handshake reads one line of each peer");

// Written by the owning rank only, once, before it counts itself attached
// (which peers acquire before they read it).
struct alignas(kLine) ServerLine {
  // memfd: the id of this rank's segment server (server_address()),
  // NUL-terminated; peers ask it for what this rank offers. A random name
  // that reaches no one outside the group before it is bound: nobody can
  // take it first.
  char id[40];
};

// Written by any rank that goes to sleep on one of the owner's words.
struct alignas(kLine) SleepLine {
  // Threads now in futex_wait on a word this rank writes. The writer calls
  // futex_wake after a store only when this is non-zero, which keeps the
  // syscall off the fast path.
  std::atomic<uint32_t> sleepers{0};
};

// Written by the owning rank only, once, at set-up: cross-memory attach's
// probe (cross_memory.h). Invariant: address, value and (at stage 2)
// refusal are written before `stage` reaches the step that publishes them
// (release), and never again.
struct alignas(kLine) ProbeLine {
  // 1: address and value name a word of the owner's own memory that its peers
  // may read now; 2: refusal says what the owner found when it read theirs.
  std::atomic<uint64_t> stage{0};
  uint64_t address;
  uint64_t value;
  // 0: it read every peer's word; else why not (CrossMemory's reasons), with
  // the peer concerned (-1: none in particular) and the errno it got.
  uint32_t refusal;
  int32_t refused_peer;
  int32_t error;
  // 1: the owner's setting is cma (it requires the single copy): where the
  // group cannot have it, set-up fails on every rank, not on this one alone.
  uint32_t required;
};

struct RankControl {
  OwnerLine own;
  SleepLine sleep;
  ProbeLine probe;
  ServerLine server;
};

enum class AbortState : uint32_t { kHealthy = 0, kWriting = 1, kAborted = 2 };

struct alignas(kLine) Header {
  // Stored last, with release, by the creator; an attaching rank acquires it
  // before it reads the rest. (The name reaches other ranks through the store,
  // which orders it too; the atomic keeps the header right on its own.)
  std::atomic<uint64_t> magic;
  uint32_t version;
  uint32_t world;
  uint64_t total_bytes;
  uint64_t data_offset;
  uint64_t data_bytes;
  uint64_t data_params[kDataParams];  // the data path's own description of its region
  // Where the group's other segments (point-to-point channels) come from: the
  // transport (ShmTransport), the group's id (in the channels' names, in
  // shm_dir() or as memfd names) and its secret, which every rank's server
  // asks for. Only the group's ranks can read them: the secret reaches a rank
  // with this segment and in no other way.
  uint32_t transport;
  char group_id[40];
  uint8_t secret[32];
  // Ranks that have mapped the segment; the segment's name is unlinked once
  // this reaches world.
  std::atomic<uint32_t> attached;
  // Set once, by the first rank that sees a peer die or time out: kWriting while
  // it fills abort_reason, then kAborted (release). Every later wait on any rank
  // fails fast with that reason, so no rank waits on a broken communicator.
  std::atomic<uint32_t> abort_state;
  int32_t abort_by;
  int32_t abort_dead;  // the rank whose exit caused the abort, or -1 (written with abort_reason)
  char abort_reason[400];
};

inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

inline size_t control_offset() { return align_up(sizeof(Header), kLine); }
inline size_t data_region_offset(int world) {
  return align_up(control_offset() + sizeof(RankControl) * size_t(world), 4096);
}

}  // namespace pycomm::core
