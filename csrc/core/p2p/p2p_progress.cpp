// The progress pass of P2PEngine (p2p_engine.h): what one look at every peer
// does, under the engine's lock. It pushes pending sends into their channels
// (or announces them straight), pulls arrived frames into their receives or
// holds them as unexpected, matches receives to messages, and trades the
// receivers' verdicts (a refused message) with the senders.
#include <algorithm>
#include <cstring>
#include <new>
#include <sstream>
#include <utility>

#include "../errors.h"
#include "../transport/shm_segment.h"
#include "p2p_engine.h"

namespace pycomm::core {
namespace {

// A message of more than one frame that arrives before its receive is held in
// the channel this long before it is taken into an unexpected buffer (a new
// allocation and a second copy of the whole message: 16 MiB cost 3-4 ms on
// the 2-core host, measured once on 2026-12-02). batch_isend_irecv posts the receive a few microseconds
// after the send, and the peer's helper may stream meanwhile; before the hold,
// nearly every 16 MiB exchange went through an unexpected buffer. Its sender
// waits for this receiver's progress either way (the message is larger than a
// frame), and after the hold it is taken, so two ranks that both send first
// still complete.
constexpr uint64_t kHoldNs = 200'000;
// A message of a stream (more sends to its peer pending) goes straight up to
// this size, and through the frames above it, whose copies in and out overlap
// on the two cores once the copies outgrow the caches. Windows of sends on the
// 2-core host, per message, straight against framed (measured once on
// 2026-12-05): 256 KiB 16 us against 36, 512 KiB 33 against 47, 1 MiB 101
// against 72, 2 MiB 276 against 194.
constexpr size_t kStreamStraightMaxBytes = size_t(512) << 10;

}  // namespace

bool P2PEngine::pass_locked(Done& done) {
  hold_until_ns_ = 0;  // set again by whatever is still held
  bool moved = false;
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    if (!sends_[size_t(p)].empty()) moved |= push_sends_locked(p, done);
    moved |= pull_frames_locked(p, done);
    moved |= take_verdicts_locked(p, done);
    // Refusals that waited for the sender to read the one before.
    if (!refusals_[size_t(p)].empty() && publish_verdicts_locked(p)) ch_.ring(p);
  }
  return moved;
}

void P2PEngine::copy(void* dst, const void* src, size_t bytes) {
  if (team_) team_copy(*team_, dst, src, bytes);
  else std::memcpy(dst, src, bytes);
}

bool P2PEngine::straight(const P2POp& op) const {
  return cma_ && cma_->enabled() && op.bytes >= straight_min_bytes_;
}

bool P2PEngine::read_straight_locked(int peer, void* dst, uint64_t address, size_t bytes, Done& done) {
  try {
    if (team_) {
      team_->split(bytes, 1, [&](size_t first, size_t count) {
        cma_->read(peer, static_cast<char*>(dst) + first, address + first, count);
      });
    } else {
      cma_->read(peer, dst, address, bytes);
    }
    return true;
  } catch (const CommError&) {
    // The read aborted the session with its reason (a dead sender, a range
    // not mapped): every pending operation fails with it.
    fail_all_locked("", done);
    return false;
  }
}

bool P2PEngine::frame_ok_locked(int peer, const FrameHeader& h, Done& done) {
  const Incoming& in = incoming_[size_t(peer)];
  const bool starts = !in.active;
  const uint64_t total = starts ? h.total_bytes : in.total;
  const uint64_t at = starts ? 0 : in.got;
  const bool ok = h.address ? (starts && h.bytes == 0 && h.offset == 0 && cma_ && cma_->enabled())
                            : (h.bytes <= ch_.frame_bytes() && h.offset == at && h.bytes <= total - at &&
                               h.total_bytes == total && (h.bytes > 0 || total == 0));
  if (ok) return true;
  std::ostringstream os;
  os << "rank " << rank_ << ": rank " << peer << " wrote a point-to-point frame that does not fit its message ("
     << h.bytes << " bytes at offset " << h.offset << " of " << h.total_bytes << ", expected offset " << at
     << " of " << total << (h.address ? ", sent straight" : "") << ")";
  corrupt_channel_locked(os.str(), done);
  return false;
}

void P2PEngine::corrupt_channel_locked(const std::string& what, Done& done) {
  session_.abort(what + ": the channel is corrupt");
  fail_all_locked("", done);
}

bool P2PEngine::push_sends_locked(int peer, Done& done) {
  auto& queue = sends_[size_t(peer)];
  bool moved = false;
  while (!queue.empty() && ch_.can_send(peer)) {
    P2POp& op = *queue.front();
    const bool lone = queue.size() == 1 && unjudged_[size_t(peer)].empty();
    if (op.moved_ == 0 && straight(op) && (lone || op.bytes <= kStreamStraightMaxBytes)) {
      // One frame that says where the message lies; the receiver copies it.
      ch_.send_header(peer) = FrameHeader{op.message_, op.bytes, 0, op.tag, 0, op.type,
                                          reinterpret_cast<uint64_t>(op.data)};
      ch_.commit(peer);
      op.moved_ = op.bytes;
      moved = true;
      op.streamed_ = true;
      unjudged_[size_t(peer)].push_back(std::move(queue.front()));
      queue.pop_front();
      continue;
    }
    const size_t n = std::min(op.bytes - op.moved_, ch_.frame_bytes());
    ch_.send_header(peer) = FrameHeader{op.message_, op.bytes, op.moved_, op.tag, uint32_t(n), op.type, 0};
    if (n) copy(ch_.send_payload(peer), op.data + op.moved_, n);
    ch_.commit(peer);
    op.moved_ += n;
    moved = true;
    // Its last frame is in shared memory: its buffer is free again, and it
    // completes once the receiver has judged it (take_verdicts_locked).
    if (op.moved_ == op.bytes) {
      op.streamed_ = true;
      unjudged_[size_t(peer)].push_back(std::move(queue.front()));
      queue.pop_front();
    }
  }
  if (moved) ch_.ring(peer);
  return moved;
}

bool P2PEngine::take_verdicts_locked(int peer, Done& done) {
  // judged first, then the notice line: a refusal is left before judged
  // passes its message, so every refusal of a message below `judged` is seen.
  const uint64_t judged = ch_.judged_by(peer);
  take_notices_locked(peer);
  auto& queue = unjudged_[size_t(peer)];
  bool moved = false;
  while (!queue.empty() && queue.front()->message_ < judged) {
    P2PHandle finished = std::move(queue.front());
    queue.pop_front();
    finish_locked(finished, finished->refused_, done);
    moved = true;
  }
  return moved;
}

bool P2PEngine::pull_frames_locked(int peer, Done& done) {
  bool moved = false;
  Incoming& in = incoming_[size_t(peer)];
  while (ch_.can_recv(peer)) {
    const FrameHeader h = ch_.recv_header(peer);
    if (!frame_ok_locked(peer, h, done)) return true;
    if (!in.active && !begin_message_locked(peer, h, done)) break;
    if (h.address) {
      // Straight: the whole message, out of the sender's memory. Judged (and
      // so released to its sender) only once this copy is done.
      void* into = in.recv ? static_cast<void*>(in.recv->data)
                           : in.unexpected ? static_cast<void*>(in.unexpected->data.get()) : nullptr;
      if (into && h.total_bytes && !read_straight_locked(peer, into, h.address, h.total_bytes, done)) return true;
      if (session_.aborted()) {
        // The sender may have given up on this send (its deadline) while this
        // rank read, and reused its buffer: what was read is not trusted.
        fail_all_locked("", done);
        return true;
      }
      if (in.unexpected) in.unexpected->got = h.total_bytes;
      in.got = h.total_bytes;
    } else if (h.bytes) {
      const char* src = ch_.recv_payload(peer);
      if (in.recv) {
        copy(in.recv->data + h.offset, src, h.bytes);
      } else if (in.unexpected) {
        copy(in.unexpected->data.get() + h.offset, src, h.bytes);
        in.unexpected->got += h.bytes;
      }
    }
    if (!h.address) in.got += h.bytes;
    ch_.consume(peer);
    moved = true;
    if (h.address) {
      // A straight message took a long copy: its sender learns at once that
      // it is judged and its frame free, rather than after the frames behind
      // it are read too (2 MiB messages in a window: 250 us a message with
      // one ring a pass, the sender asleep meanwhile; measured once on 2026-12-05).
      publish_verdicts_locked(peer);
      ch_.ring(peer);
    }
    if (in.got == in.total) {
      if (in.recv) {
        in.recv->moved_ = in.total;
        finish_locked(in.recv, nullptr, done);
      }
      in = Incoming{};
    }
  }
  // The verdicts go with the consumes, under one ring of the sender's bell.
  if (moved) {
    publish_verdicts_locked(peer);
    ch_.ring(peer);
  }
  return moved;
}

bool P2PEngine::begin_message_locked(int peer, const FrameHeader& h, Done& done) {
  Incoming& in = incoming_[size_t(peer)];
  // The earliest posted receive that takes it (MPI's matching order).
  auto match = std::find_if(recvs_.begin(), recvs_.end(), [&](const P2PHandle& r) {
    return (r->peer == peer || r->peer == P2POp::kAnySource) && r->tag == h.tag;
  });
  // A straight message waits for its receive too: taken into a buffer, it
  // would be copied twice.
  if (match == recvs_.end() && (h.total_bytes > ch_.frame_bytes() || h.address)) {
    const uint64_t now = monotonic_ns();
    uint64_t& since = held_since_[size_t(peer)];
    if (since == 0) since = now;
    if (now - since < kHoldNs) {
      const uint64_t due = since + kHoldNs;
      if (hold_until_ns_ == 0 || due < hold_until_ns_) hold_until_ns_ = due;
      return false;
    }
  }
  held_since_[size_t(peer)] = 0;
  // Matched or taken into a buffer: judged either way (messages from one peer
  // begin in the order they were sent, so a count says which).
  ++judged_[size_t(peer)];
  in = Incoming{};
  in.active = true;
  in.message = h.message;
  in.total = h.total_bytes;
  if (match != recvs_.end()) {
    P2PHandle recv = std::move(*match);
    recvs_.erase(match);
    if (accept_locked(recv, peer, h.message, h.total_bytes, h.type, done)) in.recv = std::move(recv);
    return true;
  }
  auto u = std::make_shared<Unexpected>();
  u->source = peer;
  u->tag = h.tag;
  u->type = h.type;
  u->message = h.message;
  u->arrival = arrivals_++;
  u->bytes = h.total_bytes;
  // The size is the sender's word, read from shared memory: a corrupt one
  // fails the group rather than take (or exhaust) this process's memory.
  // Asking the kernel how much is left costs tens of microseconds (it reads
  // /proc), so only sizes that could matter ask.
  constexpr uint64_t kAskFromBytes = uint64_t(64) << 20;
  try {
    if (h.total_bytes >= kAskFromBytes && h.total_bytes > memory_available()) throw std::bad_alloc();
    u->data = std::make_unique_for_overwrite<char[]>(h.total_bytes);
  } catch (const std::bad_alloc&) {
    corrupt_channel_locked("rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                               " announced a point-to-point message of " + std::to_string(h.total_bytes) +
                               " bytes that no receive was posted for, more than this process can hold",
                           done);
    in = Incoming{};
    return false;
  }
  unexpected_[size_t(peer)].push_back(u);
  in.unexpected = std::move(u);
  return true;
}

bool P2PEngine::match_unexpected_locked(const P2PHandle& op, Done& done) {
  // The earliest arrival that takes it: per source, the first with its tag.
  std::shared_ptr<Unexpected> best;
  for (int p = 0; p < world_; ++p) {
    if (op->peer != P2POp::kAnySource && op->peer != p) continue;
    for (const auto& u : unexpected_[size_t(p)]) {
      if (u->tag != op->tag) continue;
      if (!best || u->arrival < best->arrival) best = u;
      break;
    }
  }
  if (!best) return false;
  auto& queue = unexpected_[size_t(best->source)];
  queue.erase(std::find(queue.begin(), queue.end(), best));
  Incoming& in = incoming_[size_t(best->source)];
  const bool arriving = in.active && in.unexpected == best;
  if (arriving) in.unexpected.reset();  // refused, its rest goes nowhere; else into `op`
  // The message was judged when it was taken in, and its send completed then
  // (or completes once streamed): the refusal is this receive's alone.
  if (!accept_locked(op, best->source, best->message, best->bytes, best->type, done,
                     /*tell_sender=*/false)) {
    return true;
  }
  if (best->got) std::memcpy(op->data, best->data.get(), best->got);
  if (arriving) {
    in.recv = op;
  } else {
    op->moved_ = op->bytes;
    finish_locked(op, nullptr, done);
  }
  return true;
}

bool P2PEngine::accept_locked(const P2PHandle& recv, int source, uint64_t message, size_t total,
                              uint32_t type, Done& done, bool tell_sender) {
  recv->source = source;
  if (total == recv->bytes && type == recv->type) return true;
  std::ostringstream pair;
  pair << "rank " << source << " sent " << total << " bytes of " << type_name_(type) << " with tag "
       << recv->tag << ", rank " << rank_ << " receives " << recv->bytes << " bytes of "
       << type_name_(recv->type) << " (a send and a receive that do not match)";
  if (tell_sender) {
    refusals_[size_t(source)].push_back(Refusal{message, pair.str()});
    ++refusals_waiting_;
  }
  finish_locked(recv,
                std::make_exception_ptr(CollectiveMismatch(on_this_rank(*recv) +
                                                           ": " + pair.str())),
                done);
  return false;
}

void P2PEngine::take_notices_locked(int peer) {
  uint64_t message = 0;
  std::string why;
  if (!ch_.take_notice(peer, &message, &why)) return;
  ch_.ring(peer);  // the receiver may hold the next refusal for this line
  // The send it refuses, if it is still pending: streaming (it still streams
  // out, so the channel stays in step) or awaiting its verdict. A send that
  // already completed (its message was taken into a buffer first) is not
  // raised anywhere: its receive raised, and later calls are not its.
  for (auto* queue : {&sends_[size_t(peer)], &unjudged_[size_t(peer)]}) {
    for (const auto& op : *queue) {
      if (op->message_ == message) {
        op->refused_ = std::make_exception_ptr(
            CollectiveMismatch(on_this_rank(*op) + ": " + why));
        return;
      }
    }
  }
}

bool P2PEngine::publish_verdicts_locked(int sender) {
  auto& refusals = refusals_[size_t(sender)];
  bool wrote = false;
  while (!refusals.empty() && ch_.leave_notice(sender, refusals.front().message, refusals.front().why)) {
    refusals.pop_front();
    --refusals_waiting_;
    wrote = true;
  }
  // Never past a refusal the sender cannot read yet: its send would complete
  // without it. The sender reads the line in its own passes and rings this
  // rank's bell; the helper makes the next pass here if nobody else does, so
  // a refusal never waits for this rank's next call.
  uint64_t judged = judged_[size_t(sender)];
  if (!refusals.empty()) {
    judged = std::min(judged, refusals.front().message);
    wake_helper_locked();
  }
  if (judged > published_[size_t(sender)]) {
    published_[size_t(sender)] = judged;
    ch_.judge(sender, judged);
    wrote = true;
  }
  return wrote;
}

void P2PEngine::finish_locked(const P2PHandle& op, std::exception_ptr err, Done& done) {
  op->error_ = std::move(err);
  op->state_.store(P2POp::kFinished, std::memory_order_release);
  --outstanding_;
  if (op->helped_) --helped_;
  done.push_back(op);
}

void P2PEngine::complete(Done& done) {
  for (const auto& op : done) {
    if (op->on_done) op->on_done(*op);
  }
  done.clear();
}

}  // namespace pycomm::core
