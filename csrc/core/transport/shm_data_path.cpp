#include "shm_data_path.h"

#include <algorithm>
#include <string>

#include "../checked_size.h"
#include "../errors.h"

namespace pycomm::core {
namespace {

// All-to-all's links (every peer but rank+1) share this much of each rank's
// memory, so that a rank's part stays the same size as the group grows.
constexpr size_t kPeerLinkBudget = 512u << 10;
// However many peers share the budget, their buffers keep at least this much,
// so that each round trip of the flags moves more than a few lines; low enough
// that the budget holds up to 130 ranks.
constexpr size_t kMinPeerLinkBytes = 1u << 10;

enum Param { kSlotBytes = 0, kLinkBytes = 1, kLinkBuffers = 2, kPeerLinkBytes = 3 };

// What the region's sizes are derived from, for the error where one does not fit.
constexpr const char* kSizedBy =
    "the shared-memory data path (PYCOMM_DIRECT_KB, PYCOMM_RING_BUFFER_KB, PYCOMM_RING_BUFFERS "
    "and the ranks)";

struct Sizes {
  size_t slot;       // each of a rank's two slots
  size_t link;       // each buffer of the link to rank+1
  size_t peer_link;  // each buffer of the links to rank+2 .. rank+world-1
  size_t buffers;    // buffers per link
};

Sizes sizes_for(int world, const ShmDataConfig& c) {
  // Two buffers at least: with one, a rank that holds its predecessor's buffer
  // while it waits for its own to drain would wait around the whole ring.
  if (c.link_buffers < 2) throw InvalidArgument("link_buffers must be at least 2");
  if (c.link_bytes < 64 || c.slot_bytes < 64) throw InvalidArgument("buffer sizes must be at least 64 bytes");
  Sizes s;
  s.buffers = c.link_buffers;
  s.link = checked_align_up(c.link_bytes, 64, kSizedBy);
  s.peer_link = s.link;
  if (world > 2) {
    const size_t fair = kPeerLinkBudget / checked_mul(size_t(world - 2), c.link_buffers, kSizedBy) / 64 * 64;
    s.peer_link = std::min(s.link, std::max(kMinPeerLinkBytes, fair));
  }
  // A slot holds at least one element of every rank's chunk (reduce-scatter)
  // and what all-to-all posts per peer (its split sizes and where a block
  // lies): 24 bytes per rank.
  s.slot = checked_align_up(std::max(c.slot_bytes, size_t(world) * 24), 64, kSizedBy);
  return s;
}

// One rank's part of the region: its two slots, its link to rank+1, then its
// links to rank+2 .. rank+world-1 in order of distance. Checked: the sizes come
// from settings, or from the header an attaching rank reads, and a product
// that wraps would lay the buffers past the segment's end.
size_t rank_bytes(int world, const Sizes& s) {
  const size_t ring = world > 1 ? checked_mul(s.buffers, s.link, kSizedBy) : 0;
  const size_t other_buffers = world > 2 ? checked_mul(size_t(world - 2), s.buffers, kSizedBy) : 0;
  const size_t others = checked_mul(other_buffers, s.peer_link, kSizedBy);
  const size_t slots = checked_mul(size_t(2), s.slot, kSizedBy);
  return checked_align_up(checked_add(checked_add(slots, ring, kSizedBy), others, kSizedBy), 4096, kSizedBy);
}

// The region: the control lines, then every rank's part.
size_t region_bytes(size_t control, int world, size_t per_rank) {
  return checked_add(control, checked_mul(per_rank, size_t(world), kSizedBy), kSizedBy);
}

}  // namespace

// The only part that grows as W^2: 256 bytes a pair, 256 KiB at W = 32.
size_t ShmDataPath::control_bytes(int world) {
  const size_t pairs = checked_mul(size_t(world), size_t(world), kSizedBy);
  return checked_align_up(checked_mul(sizeof(LinkControl), pairs, kSizedBy), 4096, kSizedBy);
}

size_t ShmDataPath::bytes_per_rank(int world, const ShmDataConfig& c) {
  return rank_bytes(world, sizes_for(world, c));
}

DataRegion ShmDataPath::region(int world, const ShmDataConfig& c) {
  const Sizes s = sizes_for(world, c);
  DataRegion r;
  r.bytes = region_bytes(control_bytes(world), world, rank_bytes(world, s));
  r.params[kSlotBytes] = s.slot;
  r.params[kLinkBytes] = s.link;
  r.params[kLinkBuffers] = s.buffers;
  r.params[kPeerLinkBytes] = s.peer_link;
  return r;
}

ShmDataPath::ShmDataPath(Session& session)
    : session_(session),
      rank_(session.rank()),
      world_(session.world()),
      base_(session.data_region()),
      slot_bytes_(session.data_params()[kSlotBytes]),
      link_bytes_(session.data_params()[kLinkBytes]),
      peer_link_bytes_(session.data_params()[kPeerLinkBytes]),
      link_buffers_(session.data_params()[kLinkBuffers]) {
  // The same layout the creator reserved (region()), from the sizes it
  // recorded in the header; sizes whose layout does not fit in 64 bits cannot
  // be what it reserved.
  bool fits = slot_bytes_ != 0 && link_bytes_ != 0 && peer_link_bytes_ != 0 && link_buffers_ >= 2;
  try {
    rank_data_offset_ = control_bytes(world_);
    rank_data_bytes_ = rank_bytes(world_, Sizes{slot_bytes_, link_bytes_, peer_link_bytes_, link_buffers_});
    fits = fits && region_bytes(rank_data_offset_, world_, rank_data_bytes_) <= session.data_bytes();
  } catch (const InvalidArgument&) {
    fits = false;
  }
  if (!fits) {
    throw CommError("rank " + std::to_string(session.rank()) +
                    ": the session's data region does not hold a shared-memory data path");
  }
  sent_.assign(size_t(world_), 0);
  received_.assign(size_t(world_), 0);
  slot_ptrs_.assign(size_t(world_), nullptr);
  // Memory placed for its reader, before any peer maps it (every rank builds
  // its data path before the session starts): the slots this rank writes and
  // every rank reads, and the ring link only this rank reads.
  placement_.node = current_numa_node();
  place_on_node(slot_at(rank_, 0), 2 * slot_bytes_, placement_.node, placement_);
  if (world_ > 1) {
    place_on_node(link_buffer((rank_ + world_ - 1) % world_, rank_, 0), link_buffers_ * link_bytes_,
                  placement_.node, placement_);
  }
}

char* ShmDataPath::slot_at(int r, uint64_t handshake) const {
  return base_ + rank_data_offset_ + rank_data_bytes_ * size_t(r) + slot_bytes_ * size_t(handshake & 1);
}

char* ShmDataPath::link_buffer(int from, int to, uint64_t message) const {
  char* links = base_ + rank_data_offset_ + rank_data_bytes_ * size_t(from) + 2 * slot_bytes_;
  const size_t buffer = size_t(message % link_buffers_);
  const int distance = (to - from + world_) % world_;
  if (distance == 1) return links + buffer * link_bytes_;
  // The other links follow the ring's, by distance 2 .. world-1.
  return links + link_buffers_ * link_bytes_ +
         (size_t(distance - 2) * link_buffers_ + buffer) * peer_link_bytes_;
}

const void* const* ShmDataPath::slots() {
  for (int r = 0; r < world_; ++r) slot_ptrs_[size_t(r)] = slot(r);
  return slot_ptrs_.data();
}

void* ShmDataPath::send_buffer(int peer) {
  const uint64_t m = sent_[size_t(peer)];
  if (m >= link_buffers_) {
    // Links carry a collective's stream after its handshake: the peer is in it.
    session_.wait_at_least(link(rank_, peer).ack.acked, m - link_buffers_ + 1, peer, peer,
                           "to read a buffer this rank sent it", /*mid_stream=*/true);
  }
  return link_buffer(rank_, peer, m);
}

void ShmDataPath::send_commit(int peer) {
  const uint64_t m = ++sent_[size_t(peer)];
  session_.publish(link(rank_, peer).sent.sent, m, rank_);
}

const void* ShmDataPath::recv_buffer(int peer) {
  const uint64_t m = received_[size_t(peer)];
  session_.wait_at_least(link(peer, rank_).sent.sent, m + 1, peer, peer, "to send data",
                         /*mid_stream=*/true);
  return link_buffer(peer, rank_, m);
}

void ShmDataPath::recv_commit(int peer) {
  const uint64_t m = ++received_[size_t(peer)];
  session_.publish(link(peer, rank_).ack.acked, m, rank_);
}

}  // namespace pycomm::core
