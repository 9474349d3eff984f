// The shared-memory data path: moves bytes between the CPU ranks of one host
// through a region of the session's segment. Two kinds of buffer, each naming
// its peer; the algorithm (collectives/) picks the peers:
//
//   slots   one per rank, double-buffered by the parity of the handshake that
//           publishes it: a rank fills next_slot(), enters the handshake, and
//           then every peer may read slot(r) until the next handshake. One
//           shot, many readers (direct algorithms, broadcast, all-gather).
//   links   a single-producer single-consumer queue from each rank to each
//           peer, `link_buffers` messages of `link_bytes` deep:
//           send_buffer(peer) / send_commit(peer) on one side,
//           recv_buffer(peer) / recv_commit(peer) on the other. Pipelined
//           (the ring to rank+1, all-to-all pairs).
//
// Every wait goes through the session's wait policy, so it has the session's
// deadline, peer watch and abort.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "session.h"

namespace pycomm::core {

struct ShmDataConfig {
  size_t slot_bytes = 256 * 1024;
  size_t link_bytes = 256 * 1024;
  size_t link_buffers = 4;
};

class ShmDataPath {
 public:
  // What the session's creator must reserve for `world` ranks. Large worlds
  // get shorter link buffers so a rank's links stay within a fixed budget.
  static DataRegion region(int world, const ShmDataConfig& config);

  // Lays the data path over the session's region (sizes from its header).
  explicit ShmDataPath(Session& session);

  Session& session() const { return session_; }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t link_bytes() const { return link_bytes_; }
  size_t link_buffers() const { return link_buffers_; }

  // The slot this rank fills before its next handshake.
  void* next_slot() { return slot_at(session_.rank(), session_.entered() + 1); }
  // Rank r's slot of the handshake that just completed.
  const void* slot(int r) const { return slot_at(r, session_.entered()); }
  // Every rank's slot of the handshake that just completed, in rank order.
  const void* const* slots();

  void* send_buffer(int peer);
  void send_commit(int peer);
  const void* recv_buffer(int peer);
  void recv_commit(int peer);

 private:
  // sent: written by `from`; message m sits in buffer m % link_buffers and is
  // complete once sent > m (release). acked: written by `to`; `from` may
  // overwrite buffer m % link_buffers once acked > m - link_buffers.
  struct alignas(kLine) SentLine { std::atomic<uint64_t> sent{0}; };
  struct alignas(kLine) AckLine { std::atomic<uint64_t> acked{0}; };
  struct LinkControl {
    SentLine sent;
    AckLine ack;
  };

  LinkControl& link(int from, int to) const {
    return reinterpret_cast<LinkControl*>(base_)[size_t(from) * size_t(world_) + size_t(to)];
  }
  char* slot_at(int r, uint64_t handshake) const;
  char* link_buffer(int from, int to, uint64_t message) const;

  Session& session_;
  const int rank_;
  const int world_;
  char* base_;
  size_t slot_bytes_;
  size_t link_bytes_;
  size_t link_buffers_;
  size_t rank_data_offset_;
  size_t rank_data_bytes_;
  // Local mirrors (this rank is their only writer): messages sent to each peer
  // and received from each peer.
  std::vector<uint64_t> sent_;
  std::vector<uint64_t> received_;
  std::vector<const void*> slot_ptrs_;  // slots()'s answer, sized once
};

}  // namespace pycomm::core
