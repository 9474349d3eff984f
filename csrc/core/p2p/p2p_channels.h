// The shared memory of point-to-point: a channel from each rank to each peer
// it sends to, a notice line back, and a doorbell per rank. Bytes only; which
// message goes into which frame, and what matches what, is the engine's
// (p2p_engine.h).
//
//   channel(from, to)  `frames` frames of `frame_bytes` each, a single-producer
//                      single-consumer queue: `from` fills a frame (header and
//                      payload) and commits it, `to` reads it and consumes it.
//                      Frames leave in the order they were committed, which is
//                      what keeps messages between two ranks in order.
//   judged(from, to)   written by `to`: how many of `from`'s messages it has
//                      taken in (matched to a receive, or into a buffer while
//                      none is posted). A send completes once its message is
//                      judged, so a refusal reaches the send itself.
//   notice(from, to)   written by `to`: the last message of `from` that it
//                      refused (sizes or dtypes differ), with the reason, so the
//                      sender raises the same error as the receiver.
//   doorbell(r)        any rank rings it after it committed a frame to r,
//                      consumed one from r, or left r a notice; r's progress
//                      sleeps on it (a futex) when nothing else can move.
//
// A channel is made when its pair first talks, not at set-up: a group whose
// ranks never send costs no channel memory, and one whose ranks send only to
// their neighbours costs two channels a rank, not W - 1. The sender makes
// channel(from, to) in a segment of its own (Session::make_segment), on its
// first send to `to`, then sets its bit in `to`'s offer line (in the session's
// segment) and rings `to`. The receiver maps it the first time it looks for
// frames from `from` and finds the bit set (Session::fetch_segment, within the
// session's timeout); a failure there aborts the session with the reason, as
// a dead peer or a timeout does. The doorbells and offer lines live in the
// session's segment, after the collectives' data path (reserve() appends
// them to its region): O(W) words each.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../transport/session.h"

namespace pycomm::core {

struct P2PConfig {
  size_t frame_bytes = 256 * 1024;
  size_t frames = 4;
};

// One frame's description, written by the sender before it commits the frame.
struct FrameHeader {
  uint64_t message;      // the sender's message number on this channel, from 0
  uint64_t total_bytes;  // of the whole message
  uint64_t offset;       // of this frame's payload in the message
  int64_t tag;
  uint32_t bytes;        // payload in this frame
  uint32_t type;         // the glue's element type, compared with the receive's
  // A message sent straight (cross-memory attach): where its total_bytes lie
  // in the sender's memory, for the receiver to read until it judges the
  // message (its only frame carries no payload). 0: the payload is in frames.
  uint64_t address;
};

class P2PChannels {
 public:
  // Adds the doorbells and offer lines to the region the session's creator
  // reserves (after the data path's, whose params below kOffset stay
  // untouched), and records the frame size every channel will have. Large
  // worlds get smaller frames, so that a rank that sends to every peer keeps
  // its channels within a fixed budget.
  static void reserve(DataRegion& region, int world, const P2PConfig& config);
  // The bytes of one channel's segment in a region reserve() laid out.
  static size_t channel_bytes(const DataRegion& region);

  // Lays the doorbells and offer lines over the session's region.
  explicit P2PChannels(Session& session);
  ~P2PChannels();

  Session& session() const { return session_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  size_t frame_bytes() const { return frame_bytes_; }

  // Makes the channel to `peer` unless it exists (see above). Throws
  // CommError when its memory cannot be had; nothing is sent then.
  void open_to(int peer);
  // Bytes of channel segments this rank has mapped (made and taken).
  size_t mapped_bytes() const;

  // Sending to `peer` (open_to() first): whether a frame is free, then fill it and commit.
  bool can_send(int peer) const;
  FrameHeader& send_header(int peer) { return header(out_[size_t(peer)], sent_[size_t(peer)]); }
  char* send_payload(int peer) { return payload(out_[size_t(peer)], sent_[size_t(peer)]); }
  void commit(int peer);

  // Receiving from `peer`: whether a frame is there, then read it and consume.
  // Maps the channel from `peer` once it is offered; false until then.
  bool can_recv(int peer);
  const FrameHeader& recv_header(int peer) const { return header(in_[size_t(peer)], received_[size_t(peer)]); }
  const char* recv_payload(int peer) const { return payload(in_[size_t(peer)], received_[size_t(peer)]); }
  void consume(int peer);

  // How many of this rank's messages `peer` has judged (see judged above); 0
  // before the channel to it exists.
  uint64_t judged_by(int peer) const;
  // Publishes that `count` of `sender`'s messages are judged (never less than
  // before); only ever for a sender whose frames this rank has read.
  void judge(int sender, uint64_t count);

  // Tells `sender` that its message `message` was refused and why. False when
  // the sender has not yet read the previous notice: the caller keeps this
  // one and leaves it later (the engine's refusals_).
  bool leave_notice(int sender, uint64_t message, const std::string& why);
  // A notice `receiver` left this rank, if there is a new one.
  bool take_notice(int receiver, uint64_t* message, std::string* why);

  // This rank's doorbell: read it before looking for work, then sleep until
  // it moves on from that value (at most max_ns).
  uint64_t bell() const;
  void sleep_on_bell(uint64_t seen, uint64_t max_ns);
  void ring(int r);

 private:
  // posted by the channel's sender; consumed by its receiver. Invariant: frame
  // f sits at index f % frames; it is complete once posted > f (release), and
  // the sender may overwrite it once consumed > f - frames.
  struct alignas(kLine) CountLine { std::atomic<uint64_t> value{0}; };
  // judged: written by the channel's receiver; a refusal of message m is left
  // as a notice (release) before judged passes m (release), so a sender that
  // reads judged > m (acquire) and then the notice line sees the refusal.
  struct ChannelControl {
    CountLine posted;
    CountLine consumed;
    CountLine judged;
  };
  // Written by the channel's receiver: `why` and `message` are written before
  // `left` is incremented (release), and not again until the sender has set
  // `taken` to `left` (so the sender reads them while they hold still).
  struct alignas(kLine) NoticeLine {
    std::atomic<uint64_t> left{0};
    uint64_t message;
    char why[360];
  };
  struct alignas(kLine) TakenLine { std::atomic<uint64_t> taken{0}; };
  // Rung by any rank (fetch_add); sleepers counts the owner's threads in
  // futex_wait on it, so ringing costs a syscall only when one sleeps.
  struct alignas(kLine) Doorbell {
    std::atomic<uint64_t> rings{0};
    std::atomic<uint32_t> sleepers{0};
  };

  // One channel's segment: its control lines, then the frames.
  struct Channel {
    ShmSegment segment;
    char* base = nullptr;  // null: not made or taken yet
  };
  static size_t headers_offset();
  static size_t payloads_offset(size_t frames);
  static size_t channel_bytes(size_t frame_bytes, size_t frames);
  ChannelControl& control(const Channel& c) const { return *reinterpret_cast<ChannelControl*>(c.base); }
  NoticeLine& notice(const Channel& c) const;
  TakenLine& taken(const Channel& c) const;
  FrameHeader& header(const Channel& c, uint64_t frame) const;
  char* payload(const Channel& c, uint64_t frame) const;
  Doorbell& doorbell(int r) const;
  // `to`'s offer line: bit `from` is set once channel(from, to) exists.
  std::atomic<uint64_t>* offers(int to) const;
  bool offered_by(int from) const;
  // Maps the channel from `peer`; false (and the session aborted, with the
  // reason) when that fails.
  bool take_from(int peer);

  Session& session_;
  const int rank_;
  const int world_;
  char* base_;  // the doorbells, then the offer lines, in the session's segment
  size_t frame_bytes_;
  size_t frames_;
  size_t offers_offset_, offer_stride_;
  std::vector<Channel> out_;  // by peer: channel(rank_, peer)
  std::vector<Channel> in_;   // by peer: channel(peer, rank_)
  // Local mirrors (this rank is their only writer): frames committed to each
  // peer and consumed from each peer.
  std::vector<uint64_t> sent_;
  std::vector<uint64_t> received_;
};

}  // namespace pycomm::core
