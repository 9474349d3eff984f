#include "p2p_channels.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "../checked_size.h"
#include "../errors.h"
#include "../transport/wait_primitives.h"

namespace pycomm::core {
namespace {

// The data path (shm_data_path.cpp) uses the params below this index.
enum Param { kOffset = 4, kFrameBytes = 5, kFrames = 6 };

// A rank that sends to every peer keeps its channels within this much memory.
constexpr size_t kBudgetPerRank = 8u << 20;
constexpr size_t kMinFrameBytes = 16u << 10;

// What a channel's size is derived from, for the error where it does not fit.
constexpr const char* kSizedBy = "a point-to-point channel (PYCOMM_P2P_FRAME_KB, PYCOMM_P2P_FRAMES)";

// A line per rank: its doorbell. Then a line (or more) per rank: its offers.
size_t offers_offset(int world) { return kLine * size_t(world); }
size_t offer_stride(int world) { return align_up(sizeof(uint64_t) * ((size_t(world) + 63) / 64), kLine); }

}  // namespace

void P2PChannels::reserve(DataRegion& region, int world, const P2PConfig& c) {
  if (c.frames < 1) throw InvalidArgument("p2p_frames must be at least 1");
  if (c.frame_bytes < 64) throw InvalidArgument("p2p frames must be at least 64 bytes");
  size_t frame = checked_align_up(c.frame_bytes, 64, kSizedBy);
  if (world > 1) {
    const size_t fair = kBudgetPerRank / checked_mul(size_t(world - 1), c.frames, kSizedBy) / 64 * 64;
    if (frame > fair) frame = std::max(fair, kMinFrameBytes);
  }
  static_assert(sizeof(Doorbell) == kLine, "a doorbell is one line");
  // A checked channel size now, from the settings, rather than when a rank first sends.
  (void)channel_bytes(frame, c.frames);
  // The doorbells and offers follow the data path's part of the region (an int's
  // worth of ranks keeps their own size far below overflow).
  const char* what = "the session segment's size";
  const size_t offset = checked_align_up(region.bytes, kLine, what);
  region.bytes = checked_add(offset, offers_offset(world) + offer_stride(world) * size_t(world), what);
  region.params[kOffset] = offset;
  region.params[kFrameBytes] = frame;
  region.params[kFrames] = c.frames;
}

size_t P2PChannels::headers_offset() {
  return align_up(sizeof(ChannelControl) + sizeof(NoticeLine) + sizeof(TakenLine), kLine);
}

size_t P2PChannels::payloads_offset(size_t frames) {
  const size_t headers = checked_mul(sizeof(FrameHeader), frames, kSizedBy);
  return checked_align_up(checked_add(headers_offset(), headers, kSizedBy), 4096, kSizedBy);
}

size_t P2PChannels::channel_bytes(size_t frame_bytes, size_t frames) {
  const size_t payloads = checked_mul(frame_bytes, frames, kSizedBy);
  return checked_align_up(checked_add(payloads_offset(frames), payloads, kSizedBy), 4096, kSizedBy);
}

size_t P2PChannels::channel_bytes(const DataRegion& region) {
  return channel_bytes(region.params[kFrameBytes], region.params[kFrames]);
}

P2PChannels::P2PChannels(Session& session)
    : session_(session),
      rank_(session.rank()),
      world_(session.world()),
      base_(session.data_region() + session.data_params()[kOffset]),
      frame_bytes_(session.data_params()[kFrameBytes]),
      frames_(session.data_params()[kFrames]),
      offers_offset_(offers_offset(world_)),
      offer_stride_(offer_stride(world_)) {
  if (frame_bytes_ == 0 || frames_ == 0 ||
      session.data_params()[kOffset] + offers_offset_ + offer_stride_ * size_t(world_) >
          session.data_bytes()) {
    throw CommError("rank " + std::to_string(rank_) +
                    ": the session's data region holds no point-to-point doorbells");
  }
  out_.resize(size_t(world_));
  in_.resize(size_t(world_));
  sent_.assign(size_t(world_), 0);
  received_.assign(size_t(world_), 0);
}

P2PChannels::~P2PChannels() {
  // posix: a channel its peer never took still has its name; remove it.
  for (Channel& c : out_) c.segment.unlink();
}

P2PChannels::NoticeLine& P2PChannels::notice(const Channel& c) const {
  return *reinterpret_cast<NoticeLine*>(c.base + sizeof(ChannelControl));
}

P2PChannels::TakenLine& P2PChannels::taken(const Channel& c) const {
  return *reinterpret_cast<TakenLine*>(c.base + sizeof(ChannelControl) + sizeof(NoticeLine));
}

FrameHeader& P2PChannels::header(const Channel& c, uint64_t frame) const {
  return reinterpret_cast<FrameHeader*>(c.base + headers_offset())[size_t(frame % frames_)];
}

char* P2PChannels::payload(const Channel& c, uint64_t frame) const {
  return c.base + payloads_offset(frames_) + size_t(frame % frames_) * frame_bytes_;
}

P2PChannels::Doorbell& P2PChannels::doorbell(int r) const {
  return reinterpret_cast<Doorbell*>(base_)[r];
}

std::atomic<uint64_t>* P2PChannels::offers(int to) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(base_ + offers_offset_ + offer_stride_ * size_t(to));
}

bool P2PChannels::offered_by(int from) const {
  return (offers(rank_)[from / 64].load(std::memory_order_acquire) >> (from % 64)) & 1;
}

void P2PChannels::open_to(int peer) {
  Channel& c = out_[size_t(peer)];
  if (c.base) return;
  try {
    c.segment = session_.make_segment(channel_key(peer), channel_bytes(frame_bytes_, frames_));
  } catch (const CommError& e) {
    throw CommError("rank " + std::to_string(rank_) + ": making the channel to rank " +
                    std::to_string(peer) + ": " + message_of(e));
  }
  c.base = static_cast<char*>(c.segment.data());
  // Its pages came zeroed: every counter starts at 0. The offer is released
  // after them, and the receiver acquires it before it maps the channel.
  offers(peer)[rank_ / 64].fetch_or(uint64_t(1) << (rank_ % 64), std::memory_order_acq_rel);
  ring(peer);
}

bool P2PChannels::take_from(int peer) {
  Channel& c = in_[size_t(peer)];
  try {
    c.segment = session_.fetch_segment(peer, channel_key(rank_));
  } catch (const std::exception& e) {
    // The engine's next health check fails what is pending with this reason.
    // A peer that is gone closed its server before its pidfd says so: give
    // the watch a moment to name it.
    int dead = session_.first_dead_peer();
    for (int i = 0; dead < 0 && i < 50; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      dead = session_.first_dead_peer();
    }
    if (dead >= 0) {
      session_.abort("rank " + std::to_string(rank_) + ": rank " + std::to_string(dead) + " (pid " +
                         std::to_string(session_.pid_of(dead)) + ") exited while this rank took " +
                         "the channel from rank " + std::to_string(peer) +
                         ": its process is gone (killed, crashed or ended)",
                     dead);
    } else {
      session_.abort("rank " + std::to_string(rank_) + ": taking the channel from rank " +
                     std::to_string(peer) + ": " + message_of(e));
    }
    return false;
  }
  if (c.segment.size() < channel_bytes(frame_bytes_, frames_)) {
    session_.abort("rank " + std::to_string(rank_) + ": the channel rank " + std::to_string(peer) +
                   " made to it is too small (" + std::to_string(c.segment.size()) + " bytes)");
    c.segment = ShmSegment();
    return false;
  }
  c.base = static_cast<char*>(c.segment.data());
  return true;
}

size_t P2PChannels::mapped_bytes() const {
  size_t n = 0;
  for (const auto* side : {&out_, &in_}) {
    for (const Channel& c : *side) n += c.base ? c.segment.size() : 0;
  }
  return n;
}

bool P2PChannels::can_send(int peer) const {
  const Channel& c = out_[size_t(peer)];
  const uint64_t f = sent_[size_t(peer)];
  return c.base && (f < frames_ || control(c).consumed.value.load(std::memory_order_acquire) > f - frames_);
}

void P2PChannels::commit(int peer) {
  control(out_[size_t(peer)]).posted.value.store(++sent_[size_t(peer)], std::memory_order_release);
}

bool P2PChannels::can_recv(int peer) {
  const Channel& c = in_[size_t(peer)];
  // Once the session is aborted nothing is taken any more (the engine fails
  // what is pending with the abort's reason).
  if (!c.base && !(offered_by(peer) && !session_.aborted() && take_from(peer))) return false;
  return control(c).posted.value.load(std::memory_order_acquire) > received_[size_t(peer)];
}

void P2PChannels::consume(int peer) {
  control(in_[size_t(peer)]).consumed.value.store(++received_[size_t(peer)], std::memory_order_release);
}

uint64_t P2PChannels::judged_by(int peer) const {
  const Channel& c = out_[size_t(peer)];
  return c.base ? control(c).judged.value.load(std::memory_order_acquire) : 0;
}

void P2PChannels::judge(int sender, uint64_t count) {
  control(in_[size_t(sender)]).judged.value.store(count, std::memory_order_release);
}

bool P2PChannels::leave_notice(int sender, uint64_t message, const std::string& why) {
  const Channel& c = in_[size_t(sender)];
  NoticeLine& n = notice(c);
  const uint64_t left = n.left.load(std::memory_order_relaxed);  // this rank is its only writer
  if (taken(c).taken.load(std::memory_order_acquire) != left) return false;
  n.message = message;
  std::snprintf(n.why, sizeof(n.why), "%s", why.c_str());
  n.left.store(left + 1, std::memory_order_release);
  return true;
}

bool P2PChannels::take_notice(int receiver, uint64_t* message, std::string* why) {
  const Channel& c = out_[size_t(receiver)];
  if (!c.base) return false;
  NoticeLine& n = notice(c);
  const uint64_t left = n.left.load(std::memory_order_acquire);
  std::atomic<uint64_t>& seen = taken(c).taken;
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
