// The shared-memory data path: moves bytes between the CPU ranks of one host
// through a region of the session's segment. Two kinds of buffer, each naming
// its peer; the algorithm (collectives/) picks the peers:
//
//   slots   one per rank, double-buffered by the parity of the handshake that
//           publishes it: a rank fills next_slot(), enters the handshake, and
//           then every peer may read slot(r) until the next handshake. One
//           shot, many readers (direct algorithms, broadcast, all-gather).
//   links   a single-producer single-consumer queue from each rank to each
//           peer, `link_buffers` messages deep:
//           send_buffer(peer) / send_commit(peer) on one side,
//           recv_buffer(peer) / recv_commit(peer) on the other. Pipelined
//           (the ring to rank+1, all-to-all pairs).
//
// Link sizes. The link to the ring successor (rank+1) has buffers of the full
// `link_bytes`: the ring is the large-message algorithm, and its speed is the
// size of the pieces it pipelines. Only all-to-all uses the other W-2 links,
// one step each per call, so they share a fixed 512 KiB per rank in smaller
// buffers: min(link_bytes, max(1 KiB, 512 KiB / ((W-2) * link_buffers))).
// A link's size depends only on its distance (to - from mod W), so its sender
// and its receiver agree without asking. At the defaults a rank holds 512 KiB
// of slots, 1 MiB of ring link and at most 512 KiB of other links: 2 MiB per
// rank whatever W up to 130, so a group's memory grows with W, not W^2 (only
// its control lines, 256 bytes a pair, grow as W^2: 32 KiB a rank at 128).
// Beyond 130 ranks the 1 KiB floor adds 4 KiB a peer. Two ranks
// have no other links and keep the layout they always had.
//
// Every wait goes through the session's wait policy, so it has the session's
// deadline, peer watch and abort.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "numa_place.h"
#include "session.h"

namespace pycomm::core {

struct ShmDataConfig {
  size_t slot_bytes = 256 * 1024;
  size_t link_bytes = 256 * 1024;
  size_t link_buffers = 4;
};

class ShmDataPath {
 public:
  // What the session's creator must reserve for `world` ranks; the sizes it
  // settles on go into the region's params, which every rank lays out from.
  static DataRegion region(int world, const ShmDataConfig& config);
  // The bytes each rank owns in that region (slots and its outgoing links),
  // without the control lines shared by all.
  static size_t bytes_per_rank(int world, const ShmDataConfig& config);

  // Lays the data path over the session's region (sizes from its header).
  explicit ShmDataPath(Session& session);

  Session& session() const { return session_; }
  size_t slot_bytes() const { return slot_bytes_; }
  // A buffer of the link to rank+1 and from rank-1: the ring's, full size.
  size_t link_bytes() const { return link_bytes_; }
  // A buffer of the link to `peer` and from `peer`. A stream to a peer goes
  // in pieces of link_bytes_to(peer); its receiver's link_bytes_from(me)
  // is the same, since both depend on the distance alone.
  size_t link_bytes_to(int peer) const { return link_bytes_at((peer - rank_ + world_) % world_); }
  size_t link_bytes_from(int peer) const { return link_bytes_at((rank_ - peer + world_) % world_); }
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

  // Where this rank's slots and its incoming ring link were placed at set-up
  // (numa_place.h): its node, and how many of their pages ended there.
  const NumaPlacement& placement() const { return placement_; }

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
  // The control lines: a LinkControl per ordered pair of ranks.
  static size_t control_bytes(int world);

  LinkControl& link(int from, int to) const {
    return reinterpret_cast<LinkControl*>(base_)[size_t(from) * size_t(world_) + size_t(to)];
  }
  // Distance 1 is the ring's link, 2 .. world-1 the others.
  size_t link_bytes_at(int distance) const { return distance == 1 ? link_bytes_ : peer_link_bytes_; }
  char* slot_at(int r, uint64_t handshake) const;
  char* link_buffer(int from, int to, uint64_t message) const;

  Session& session_;
  const int rank_;
  const int world_;
  char* base_;
  size_t slot_bytes_;
  size_t link_bytes_;
  size_t peer_link_bytes_;
  size_t link_buffers_;
  size_t rank_data_offset_;
  size_t rank_data_bytes_;
  // Local mirrors (this rank is their only writer): messages sent to each peer
  // and received from each peer.
  std::vector<uint64_t> sent_;
  std::vector<uint64_t> received_;
  std::vector<const void*> slot_ptrs_;  // slots()'s answer, sized once
  NumaPlacement placement_;
};

}  // namespace pycomm::core
