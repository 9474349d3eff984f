#include "p2p_channels.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "../errors.h"
#include "../transport/wait_primitives.h"

namespace pycomm::core {
namespace {

// The data path (shm_data_path.cpp) uses the params below this index.
enum Param { kOffset = 4, kFrameBytes = 5, kFrames = 6 };

// A rank's channels to its peers get at most this much memory in all.
constexpr size_t kBudgetPerRank = 8u << 20;
constexpr size_t kMinFrameBytes = 16u << 10;

// Where each part sits, from the start of the channels' area.
struct Layout {
  size_t notices, bells, headers, payloads, total;
};

Layout layout_of(int world, size_t frame_bytes, size_t frames, size_t control, size_t notice,
                 size_t taken, size_t bell) {
  const size_t pairs = size_t(world) * size_t(world);
  Layout l;
  l.notices = align_up(control * pairs, kLine);
  l.bells = align_up(l.notices + (notice + taken) * pairs, kLine);
  l.headers = align_up(l.bells + bell * size_t(world), kLine);
  l.payloads = align_up(l.headers + sizeof(FrameHeader) * frames * pairs, 4096);
  // Payloads of the world * (world - 1) channels a rank has with a peer.
  l.total = align_up(l.payloads + frame_bytes * frames * size_t(world) * size_t(world - 1), 4096);
  return l;
}

}  // namespace

void P2PChannels::reserve(DataRegion& region, int world, const P2PConfig& c) {
  if (c.frames < 1) throw InvalidArgument("p2p_frames must be at least 1");
  if (c.frame_bytes < 64) throw InvalidArgument("p2p frames must be at least 64 bytes");
  size_t frame = align_up(c.frame_bytes, 64);
  if (world > 1) {
    const size_t fair = kBudgetPerRank / (size_t(world - 1) * c.frames) / 64 * 64;
    if (frame > fair) frame = std::max(fair, kMinFrameBytes);
  }
  const size_t offset = align_up(region.bytes, 4096);
  const Layout l = layout_of(world, frame, c.frames, sizeof(ChannelControl), sizeof(NoticeLine),
                             sizeof(TakenLine), sizeof(Doorbell));
  region.bytes = offset + l.total;
  region.params[kOffset] = offset;
  region.params[kFrameBytes] = frame;
  region.params[kFrames] = c.frames;
}

P2PChannels::P2PChannels(Session& session)
    : session_(session),
      rank_(session.rank()),
      world_(session.world()),
      base_(session.data_region() + session.data_params()[kOffset]),
      frame_bytes_(session.data_params()[kFrameBytes]),
      frames_(session.data_params()[kFrames]) {
  const Layout l = layout_of(world_, frame_bytes_, frames_, sizeof(ChannelControl), sizeof(NoticeLine),
                             sizeof(TakenLine), sizeof(Doorbell));
  if (frame_bytes_ == 0 || frames_ == 0 ||
      session.data_params()[kOffset] + l.total > session.data_bytes()) {
    throw CommError("rank " + std::to_string(rank_) +
                    ": the session's data region holds no point-to-point channels");
  }
  notices_offset_ = l.notices;
  bells_offset_ = l.bells;
  headers_offset_ = l.headers;
  payloads_offset_ = l.payloads;
  sent_.assign(size_t(world_), 0);
  received_.assign(size_t(world_), 0);
}

P2PChannels::ChannelControl& P2PChannels::control(int from, int to) const {
  return reinterpret_cast<ChannelControl*>(base_)[pair(from, to)];
}

P2PChannels::NoticeLine& P2PChannels::notice(int from, int to) const {
  return reinterpret_cast<NoticeLine*>(base_ + notices_offset_)[pair(from, to)];
}

P2PChannels::TakenLine& P2PChannels::taken(int from, int to) const {
  const size_t after_notices = sizeof(NoticeLine) * size_t(world_) * size_t(world_);
  return reinterpret_cast<TakenLine*>(base_ + notices_offset_ + after_notices)[pair(from, to)];
}

P2PChannels::Doorbell& P2PChannels::doorbell(int r) const {
  return reinterpret_cast<Doorbell*>(base_ + bells_offset_)[r];
}

FrameHeader& P2PChannels::header(int from, int to, uint64_t frame) const {
  return reinterpret_cast<FrameHeader*>(base_ + headers_offset_)[pair(from, to) * frames_ +
                                                                  size_t(frame % frames_)];
}

char* P2PChannels::payload(int from, int to, uint64_t frame) const {
  // The channels of `from` are numbered by distance to the peer: 0 .. world-2.
  const size_t index = size_t(from) * size_t(world_ - 1) + size_t((to - from - 1 + world_) % world_);
  return base_ + payloads_offset_ + (index * frames_ + size_t(frame % frames_)) * frame_bytes_;
}

bool P2PChannels::can_send(int peer) const {
  const uint64_t f = sent_[size_t(peer)];
  return f < frames_ ||
         control(rank_, peer).consumed.value.load(std::memory_order_acquire) > f - frames_;
}

void P2PChannels::commit(int peer) {
  control(rank_, peer).posted.value.store(++sent_[size_t(peer)], std::memory_order_release);
}

bool P2PChannels::can_recv(int peer) const {
  return control(peer, rank_).posted.value.load(std::memory_order_acquire) > received_[size_t(peer)];
}

void P2PChannels::consume(int peer) {
  control(peer, rank_).consumed.value.store(++received_[size_t(peer)], std::memory_order_release);
}

uint64_t P2PChannels::judged_by(int peer) const {
  return control(rank_, peer).judged.value.load(std::memory_order_acquire);
}

void P2PChannels::judge(int sender, uint64_t count) {
  control(sender, rank_).judged.value.store(count, std::memory_order_release);
}

bool P2PChannels::leave_notice(int sender, uint64_t message, const std::string& why) {
  NoticeLine& n = notice(sender, rank_);
  const uint64_t left = n.left.load(std::memory_order_relaxed);  // this rank is its only writer
  if (taken(sender, rank_).taken.load(std::memory_order_acquire) != left) return false;
  n.message = message;
  std::snprintf(n.why, sizeof(n.why), "%s", why.c_str());
  n.left.store(left + 1, std::memory_order_release);
  return true;
}

bool P2PChannels::take_notice(int receiver, uint64_t* message, std::string* why) {
  NoticeLine& n = notice(rank_, receiver);
  const uint64_t left = n.left.load(std::memory_order_acquire);
  std::atomic<uint64_t>& seen = taken(rank_, receiver).taken;
  if (left == seen.load(std::memory_order_relaxed)) return false;  // this rank is its only writer
  *message = n.message;
  *why = std::string(n.why, strnlen(n.why, sizeof(n.why)));
  seen.store(left, std::memory_order_release);
  return true;
}

uint64_t P2PChannels::bell() const {
  return doorbell(rank_).rings.load(std::memory_order_seq_cst);
}

void P2PChannels::sleep_on_bell(uint64_t seen, uint64_t max_ns) {
  Doorbell& d = doorbell(rank_);
  // seq_cst on both sides: either the ringer sees this sleeper, or this
  // re-check sees the ring. No lost wake-up.
  d.sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (d.rings.load(std::memory_order_seq_cst) == seen) futex_wait(d.rings, uint32_t(seen), max_ns);
  d.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void P2PChannels::ring(int r) {
  Doorbell& d = doorbell(r);
  d.rings.fetch_add(1, std::memory_order_seq_cst);
  if (d.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(d.rings);
}

}  // namespace pycomm::core
