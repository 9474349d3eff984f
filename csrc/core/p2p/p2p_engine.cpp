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

std::string P2PEngine::on_this_rank(const P2POp& op) const {
  return "rank " + std::to_string(rank_) + ": " + describe(op);
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
    if (closing_) throw CommError(on_this_rank(*op) + ": the communicator is closed");
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
        finish_locked(op, std::make_exception_ptr(CommError(on_this_rank(*op) + why)),
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

uint64_t P2PEngine::sleep_ns_locked() const {
  if (hold_until_ns_ == 0) return kSleepSliceNs;
  const uint64_t now = monotonic_ns();
  return hold_until_ns_ <= now ? 1 : std::min(kSleepSliceNs, hold_until_ns_ - now);
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
