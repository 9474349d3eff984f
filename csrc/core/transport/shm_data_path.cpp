#include "shm_data_path.h"

#include <algorithm>
#include <string>

#include "../errors.h"

namespace pycomm::core {
namespace {

// A rank's links to its peers get at most this much memory in all.
constexpr size_t kLinkBudgetPerRank = 16u << 20;
constexpr size_t kMinLinkBytes = 16u << 10;

enum Param { kSlotBytes = 0, kLinkBytes = 1, kLinkBuffers = 2 };

}  // namespace

DataRegion ShmDataPath::region(int world, const ShmDataConfig& c) {
  // Two buffers at least: with one, a rank that holds its predecessor's buffer
  // while it waits for its own to drain would wait around the whole ring.
  if (c.link_buffers < 2) throw InvalidArgument("link_buffers must be at least 2");
  if (c.link_bytes < 64 || c.slot_bytes < 64) throw InvalidArgument("buffer sizes must be at least 64 bytes");
  size_t link = align_up(c.link_bytes, 64);
  if (world > 1) {
    const size_t fair = kLinkBudgetPerRank / (size_t(world - 1) * c.link_buffers) / 64 * 64;
    if (link > fair) link = fair > kMinLinkBytes ? fair : kMinLinkBytes;
  }
  // A slot holds at least one element of every rank's chunk (reduce-scatter)
  // and the all-to-all's split sizes: 16 bytes per rank.
  const size_t slot = align_up(std::max(c.slot_bytes, size_t(world) * 16), 64);
  const size_t control = align_up(sizeof(LinkControl) * size_t(world) * size_t(world), 4096);
  const size_t per_rank = align_up(2 * slot + size_t(world - 1) * c.link_buffers * link, 4096);
  DataRegion r;
  r.bytes = control + per_rank * size_t(world);
  r.params[kSlotBytes] = slot;
  r.params[kLinkBytes] = link;
  r.params[kLinkBuffers] = c.link_buffers;
  return r;
}

ShmDataPath::ShmDataPath(Session& session)
    : session_(session),
      rank_(session.rank()),
      world_(session.world()),
      base_(session.data_region()),
      slot_bytes_(session.data_params()[kSlotBytes]),
      link_bytes_(session.data_params()[kLinkBytes]),
      link_buffers_(session.data_params()[kLinkBuffers]) {
  rank_data_offset_ = align_up(sizeof(LinkControl) * size_t(world_) * size_t(world_), 4096);
  rank_data_bytes_ = align_up(2 * slot_bytes_ + size_t(world_ - 1) * link_buffers_ * link_bytes_, 4096);
  if (slot_bytes_ == 0 || link_buffers_ < 2 ||
      rank_data_offset_ + rank_data_bytes_ * size_t(world_) > session.data_bytes()) {
    throw CommError("rank " + std::to_string(session.rank()) +
                    ": the session's data region does not hold a shared-memory data path");
  }
  sent_.assign(size_t(world_), 0);
  received_.assign(size_t(world_), 0);
  slot_ptrs_.assign(size_t(world_), nullptr);
}

char* ShmDataPath::slot_at(int r, uint64_t handshake) const {
  return base_ + rank_data_offset_ + rank_data_bytes_ * size_t(r) + slot_bytes_ * size_t(handshake & 1);
}

char* ShmDataPath::link_buffer(int from, int to, uint64_t message) const {
  // Links of `from` are numbered by distance to the peer: 0 .. world-2.
  const size_t index = size_t((to - from - 1 + world_) % world_);
  return base_ + rank_data_offset_ + rank_data_bytes_ * size_t(from) + 2 * slot_bytes_ +
         (index * link_buffers_ + size_t(message % link_buffers_)) * link_bytes_;
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
