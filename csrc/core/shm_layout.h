// The layout of a communicator's shared-memory segment.
//
//   Header | RankControl[world] | rank 0 data | rank 1 data | ...
//   rank data = direct slot x2 (parity of the collective's sequence number)
//             | ring buffer x ring_buffers
//
// Every control line has exactly one writing rank (sleepers aside), so ranks
// never write the same cache line on the hot path. Lines are 128 bytes because
// adjacent-line prefetch couples pairs of 64-byte lines.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pycomm::core {

constexpr size_t kLine = 128;
constexpr uint64_t kSegmentMagic = 0x31304d4d4f435950ULL;  // "PYCOMM01"
constexpr uint32_t kLayoutVersion = 1;

// What a rank declares when it enters a collective; all ranks must agree.
struct Fingerprint {
  uint64_t count = 0;
  uint32_t kind = 0;       // CollectiveKind
  uint32_t dtype = 0;      // DType
  uint32_t op = 0;         // ReduceOp
  uint32_t algorithm = 0;  // resolved Algorithm
  bool operator==(const Fingerprint& o) const {
    return count == o.count && kind == o.kind && dtype == o.dtype && op == o.op &&
           algorithm == o.algorithm;
  }
  bool operator!=(const Fingerprint& o) const { return !(*this == o); }
};

// Written by the owning rank only.
struct alignas(kLine) OwnerLine {
  // Number of collectives (handshakes) this rank has entered. Invariant: when a
  // peer acquire-loads arrived >= k, fingerprint[k & 1] and direct slot k & 1 of
  // this rank hold collective k's values, and stay so until the owner has seen
  // every peer arrive at k+1.
  std::atomic<uint64_t> arrived{0};
  // Ring messages this rank has published to rank+1. Invariant: message m sits
  // in ring buffer m % ring_buffers and is complete once sent > m (release).
  std::atomic<uint64_t> sent{0};
  std::atomic<int32_t> pid{0};
  Fingerprint fingerprint[2];
};

// Written only by the ring successor (rank+1) of the rank that owns this line.
struct alignas(kLine) AckLine {
  // Messages of the owner that rank+1 has finished reading. Invariant: the
  // owner may overwrite buffer m % ring_buffers once acked > m - ring_buffers.
  std::atomic<uint64_t> acked{0};
};

// Written by any rank that goes to sleep on one of the owner's words.
struct alignas(kLine) SleepLine {
  // Threads now in futex_wait on a word of this rank. The owner calls
  // futex_wake after a store only when this is non-zero, which keeps the
  // syscall off the fast path.
  std::atomic<uint32_t> sleepers{0};
};

struct RankControl {
  OwnerLine own;
  AckLine ack;
  SleepLine sleep;
};

enum class AbortState : uint32_t { kHealthy = 0, kWriting = 1, kAborted = 2 };

struct alignas(kLine) Header {
  uint64_t magic;
  uint32_t version;
  uint32_t world;
  uint64_t direct_bytes;
  uint64_t ring_buffer_bytes;
  uint64_t ring_buffers;
  uint64_t total_bytes;
  // Ranks that have mapped the segment; the segment's name is unlinked once
  // this reaches world.
  std::atomic<uint32_t> attached;
  // Set once, by the first rank that sees a peer die or time out: kWriting while
  // it fills abort_reason, then kAborted (release). Every later wait on any rank
  // fails fast with that reason, so no rank waits on a broken communicator.
  std::atomic<uint32_t> abort_state;
  int32_t abort_by;
  char abort_reason[400];
};

inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Offsets inside a segment, derived from its sizes alone.
struct SegmentLayout {
  uint32_t world = 0;
  size_t direct_bytes = 0;
  size_t ring_buffer_bytes = 0;
  size_t ring_buffers = 0;

  size_t control_offset() const { return align_up(sizeof(Header), kLine); }
  size_t data_offset() const {
    return align_up(control_offset() + sizeof(RankControl) * world, 4096);
  }
  size_t rank_data_bytes() const {
    return align_up(2 * direct_bytes + ring_buffers * ring_buffer_bytes, 4096);
  }
  size_t total_bytes() const { return data_offset() + rank_data_bytes() * world; }
  size_t direct_offset(int rank, uint64_t parity) const {
    return data_offset() + rank_data_bytes() * size_t(rank) + direct_bytes * size_t(parity & 1);
  }
  size_t ring_offset(int rank, uint64_t message) const {
    return data_offset() + rank_data_bytes() * size_t(rank) + 2 * direct_bytes +
           ring_buffer_bytes * size_t(message % ring_buffers);
  }
};

}  // namespace pycomm::core
