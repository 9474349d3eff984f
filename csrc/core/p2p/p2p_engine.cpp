#include "p2p_engine.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <sstream>
#include <utility>

#include "../errors.h"
#include "../thread_name.h"
#include "../transport/shm_segment.h"
#include "../transport/wait_primitives.h"

namespace pycomm::core {
namespace {

constexpr uint64_t kSleepSliceNs = 2'000'000;    // re-check deadlines, peers and abort this often
constexpr uint64_t kHealthEveryNs = 1'000'000;    // and no more often than this
// A message of more than one frame that arrives before its receive is held in
// the channel this long before it is taken into an unexpected buffer (a new
// allocation and a second copy of the whole message: 16 MiB cost 3-4 ms on
// the 2-core host). batch_isend_irecv posts the receive a few microseconds
// after the send, and the peer's helper may stream meanwhile; before the hold,
// nearly every 16 MiB exchange went through an unexpected buffer. Its sender
// waits for this receiver's progress either way (the message is larger than a
// frame), and after the hold it is taken, so two ranks that both send first
// still complete.
constexpr uint64_t kHoldNs = 200'000;
// A message of a stream (more sends to its peer pending) goes straight up to
// this size, and through the frames above it, whose copies in and out overlap
// on the two cores once the copies outgrow the caches. Windows of sends on the
// 2-core host, per message, straight against framed: 256 KiB 16 us against
// 36, 512 KiB 33 against 47, 1 MiB 101 against 72, 2 MiB 276 against 194.
constexpr size_t kStreamStraightMaxBytes = size_t(512) << 10;

std::string rank_text(int r) { return "rank " + std::to_string(r); }

}  // namespace

P2PEngine::P2PEngine(P2PChannels& channels, TypeName type_name, ThreadTeam* team, const CrossMemory* cma,
                     size_t straight_min_bytes)
    : ch_(channels),
      session_(channels.session()),
      type_name_(std::move(type_name)),
      team_(team),
      cma_(cma),
      straight_min_bytes_(std::max<size_t>(1, straight_min_bytes)),
      rank_(channels.rank()),
      world_(channels.world()) {
  sends_.resize(size_t(world_));
  unjudged_.resize(size_t(world_));
  judged_.assign(size_t(world_), 0);
  published_.assign(size_t(world_), 0);
  refusals_.resize(size_t(world_));
  incoming_.resize(size_t(world_));
  unexpected_.resize(size_t(world_));
  next_message_.assign(size_t(world_), 0);
  held_since_.assign(size_t(world_), 0);
}

P2PEngine::~P2PEngine() { close(); }

std::string P2PEngine::describe(const P2POp& op) const {
  std::ostringstream os;
  if (op.kind == P2POp::Kind::kSend) {
    os << "send to rank " << op.peer;
  } else if (op.peer == P2POp::kAnySource) {
    os << "recv from any rank";
  } else {
    os << "recv from rank " << op.peer;
  }
  os << " (tag " << op.tag << ", " << op.bytes << " bytes)";
  return os.str();
}

void P2PEngine::post(const P2PHandle& op) {
  const int lowest = op->kind == P2POp::Kind::kRecv ? P2POp::kAnySource : 0;
  if (op->peer < lowest || op->peer >= world_ || op->peer == rank_) {
    throw InvalidArgument((op->kind == P2POp::Kind::kSend ? "dst: rank " : "src: rank ") +
                          std::to_string(op->peer) + " is not a peer of rank " + std::to_string(rank_) +
                          " in this group of " + std::to_string(world_));
  }
  if (op->bytes && !op->data) throw InvalidArgument("p2p: no data for " + describe(*op));
  Done done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) throw CommError(rank_text(rank_) + ": " + describe(*op) + ": the communicator is closed");
    if (session_.aborted()) std::rethrow_exception(session_.aborted_error(describe(*op)));
    // A pair's channel is made at its first send (p2p_channels.h); if that
    // fails, the send raises here and nothing is queued.
    if (op->kind == P2POp::Kind::kSend) ch_.open_to(op->peer);
    op->deadline_ns_ = monotonic_ns() + uint64_t(session_.policy().timeout_s * 1e9);
    ++outstanding_;
    const size_t peer = size_t(op->peer);
    if (op->kind == P2POp::Kind::kSend) {
      op->message_ = next_message_[peer]++;
      sends_[peer].push_back(op);
      push_sends_locked(op->peer, done);
    } else if (!match_unexpected_locked(op, done)) {
      recvs_.push_back(op);
      // Its message may be in the channel already.
      for (int p = 0; p < world_; ++p) {
        if (p != rank_ && (op->peer == P2POp::kAnySource || op->peer == p)) pull_frames_locked(p, done);
      }
    }
    // The helper is woken only for what may stall without it: a send left
    // queued (its channel is full), or a message of more than one frame.
    // A small blocking receive, or a send that only awaits its verdict (the
    // receiver gives it; this rank only reads it), is waited for at once:
    // waking a thread for it would cost more than the message (and, on a
    // small host, a core). help() hands them over when nobody will wait.
    // A straight message is one frame: its send is streamed at once and awaits
    // only its verdict, and its receive is one copy by whoever drives next.
    const bool queued = op->kind == P2POp::Kind::kSend && !op->streamed_;
    if (queued || (op->bytes > ch_.frame_bytes() && !straight(*op))) help_locked(op);
  }
  complete(done);
}

void P2PEngine::help(const P2PHandle& op) {
  std::lock_guard<std::mutex> lock(mu_);
  help_locked(op);
}

void P2PEngine::help_locked(const P2PHandle& op) {
  if (op->done() || op->helped_ || closing_) return;
  op->helped_ = true;
  ++helped_;
  wake_helper_locked();
}

void P2PEngine::wake_helper_locked() {
  if (waiters_ != 0 || closing_) return;  // a waiter drives the passes
  if (!helper_.joinable()) helper_ = std::thread([this] { helper_loop(); });
  helper_cv_.notify_one();
}

bool P2PEngine::helper_has_work_locked() const {
  return (helped_ > 0 || refusals_waiting_ > 0) && waiters_ == 0;
}

void P2PEngine::wait(const P2PHandle& op) {
  if (!op->done()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++waiters_;
    }
    const WaitPolicy& policy = session_.policy();
    uint64_t spin_end = 0, yield_end = 0;
    try {
      for (bool moved = true;;) {
        if (moved) {
          // Something moved: a stream may be under way, so spin again before
          // sleeping between its frames.
          spin_end = monotonic_ns() + uint64_t(policy.spin_us * 1e3);
          yield_end = spin_end + uint64_t(policy.yield_us * 1e3);
        }
        const uint64_t seen = ch_.bell();
        Done done;
        {
          std::lock_guard<std::mutex> lock(mu_);
          moved = pass_locked(done);
          check_health_locked(done);
        }
        complete(done);
        if (op->done()) break;
        if (moved) continue;
        const uint64_t now = monotonic_ns();
        if (now < spin_end) {
          for (int i = 0; i < 64 && ch_.bell() == seen && !op->done(); ++i) cpu_relax();
        } else if (now < yield_end) {
          sched_yield();
        } else {
          uint64_t sleep_ns;
          {
            std::lock_guard<std::mutex> lock(mu_);
            sleep_ns = sleep_ns_locked();
          }
          ch_.sleep_on_bell(seen, sleep_ns);
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      --waiters_;
      throw;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--waiters_ == 0 && helper_has_work_locked()) helper_cv_.notify_one();
  }
  if (std::exception_ptr err = op->error()) std::rethrow_exception(err);
}

void P2PEngine::close() {
  Done done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closing_) {
      closing_ = true;
      const std::string why = ": the communicator was closed before it completed";
      const std::vector<P2PHandle> pending = take_pending_locked();
      for (const auto& op : pending) {
        finish_locked(op, std::make_exception_ptr(CommError(rank_text(rank_) + ": " + describe(*op) + why)),
                      done);
      }
    }
  }
  helper_cv_.notify_all();
  ch_.ring(rank_);  // the helper may sleep on the doorbell
  if (helper_.joinable() && helper_.get_id() != std::this_thread::get_id()) helper_.join();
  complete(done);
}

size_t P2PEngine::channel_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return ch_.mapped_bytes();
}

uint64_t P2PEngine::unexpected_messages() {
  std::lock_guard<std::mutex> lock(mu_);
  return arrivals_;
}

void P2PEngine::helper_loop() {
  name_this_thread("pycomm-p2p");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    helper_cv_.wait(lock, [&] { return closing_ || helper_has_work_locked(); });
    if (closing_) return;
    const uint64_t seen = ch_.bell();
    Done done;
    const bool moved = pass_locked(done);
    check_health_locked(done);
    const uint64_t sleep_ns = sleep_ns_locked();
    lock.unlock();
    complete(done);
    // No spinning here: the caller's thread computes meanwhile, and may share
    // the core with this one. A peer's frame or consume rings the doorbell.
    if (!moved) ch_.sleep_on_bell(seen, sleep_ns);
    lock.lock();
  }
}

// ---------------------------------------------------------------- the pass

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
      // one ring a pass, the sender asleep meanwhile).
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

uint64_t P2PEngine::sleep_ns_locked() const {
  if (hold_until_ns_ == 0) return kSleepSliceNs;
  const uint64_t now = monotonic_ns();
  return hold_until_ns_ <= now ? 1 : std::min(kSleepSliceNs, hold_until_ns_ - now);
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
                std::make_exception_ptr(CollectiveMismatch(rank_text(rank_) + ": " + describe(*recv) +
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
            CollectiveMismatch(rank_text(rank_) + ": " + describe(*op) + ": " + why));
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

// ---------------------------------------------------------------- failures

void P2PEngine::check_health_locked(Done& done) {
  if (outstanding_ == 0) return;
  const uint64_t now = monotonic_ns();
  if (now < next_liveness_ns_) return;
  next_liveness_ns_ = now + kHealthEveryNs;
  if (session_.aborted()) return fail_all_locked("", done);
  const int dead = session_.first_dead_peer();
  if (dead >= 0) {
    std::ostringstream os;
    os << "rank " << rank_ << ": rank " << dead << " (pid " << session_.pid_of(dead)
       << ") exited with point-to-point operations pending: its process is gone (killed, crashed or ended)";
    session_.abort(os.str(), dead);
    return fail_all_locked("", done);
  }
  // The first operation past its deadline, and what its peer did of it.
  auto late = [&](const P2PHandle& op) { return now >= op->deadline_ns_; };
  for (const auto& q : sends_) {
    for (const auto& op : q) {
      if (!late(op)) continue;
      std::ostringstream os;
      os << "rank " << rank_ << ": " << describe(*op) << ": Timed out after " << session_.policy().timeout_s
         << " s, rank " << op->peer << " took " << op->moved_ << " of its " << op->bytes
         << " bytes (does it post the receive?)";
      return fail_all_locked(session_.abort(os.str()), done, op.get());
    }
  }
  for (const auto& q : unjudged_) {
    for (const auto& op : q) {
      if (!late(op)) continue;
      std::ostringstream os;
      os << "rank " << rank_ << ": " << describe(*op) << ": Timed out after " << session_.policy().timeout_s
         << " s, rank " << op->peer << " has not taken the message in (does it post the receive?)";
      return fail_all_locked(session_.abort(os.str()), done, op.get());
    }
  }
  auto recv_late = [&](const P2PHandle& op, size_t got) {
    std::ostringstream os;
    os << "rank " << rank_ << ": " << describe(*op) << ": Timed out after " << session_.policy().timeout_s << " s, ";
    if (got) {
      os << "rank " << op->source << " sent " << got << " of its bytes";
    } else if (op->peer == P2POp::kAnySource) {
      os << "no rank sent a message with this tag";
    } else {
      os << "rank " << op->peer << " sent no message with this tag";
    }
    fail_all_locked(session_.abort(os.str()), done, op.get());
  };
  for (const auto& in : incoming_) {
    if (in.recv && late(in.recv)) return recv_late(in.recv, in.got);
  }
  for (const auto& op : recvs_) {
    if (late(op)) return recv_late(op, 0);
  }
}

std::vector<P2PHandle> P2PEngine::take_pending_locked() {
  std::vector<P2PHandle> pending;
  for (auto* queues : {&sends_, &unjudged_}) {
    for (auto& q : *queues) {
      pending.insert(pending.end(), q.begin(), q.end());
      q.clear();
    }
  }
  pending.insert(pending.end(), recvs_.begin(), recvs_.end());
  recvs_.clear();
  // A message part way in loses its receive: its rest goes nowhere.
  for (auto& in : incoming_) {
    if (in.recv) pending.push_back(std::move(in.recv));
    in.recv.reset();
  }
  return pending;
}

void P2PEngine::fail_all_locked(const std::string& culprit_why, Done& done, const P2POp* culprit) {
  for (const auto& op : take_pending_locked()) {
    finish_locked(op, op.get() == culprit ? std::make_exception_ptr(CommTimeout(culprit_why))
                                          : session_.aborted_error(describe(*op)),
                  done);
  }
}

}  // namespace pycomm::core
