#include "session.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "../call_profile.h"
#include "../checked_size.h"
#include "../errors.h"
#include "wait_primitives.h"

namespace pycomm::core {
namespace {

constexpr uint64_t kSleepSliceNs = 2'000'000;    // re-check abort, deadline and peers this often
constexpr uint64_t kLivenessEveryNs = 1'000'000;  // ask the kernel about peers at most this often

void check_args(int rank, int world) {
  if (world < 1) throw InvalidArgument("world size must be at least 1");
  if (rank < 0 || rank >= world) throw InvalidArgument("rank out of range");
}

}  // namespace

uint64_t monotonic_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

const char* transport_name(ShmTransport t) {
  return t == ShmTransport::kMemfd ? "memfd" : "posix";
}

std::string SegmentPlace::to_string() const {
  return transport == ShmTransport::kPosix ? "posix:" + name : "memfd:" + server;
}

SegmentPlace SegmentPlace::parse(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (kind == "posix" && colon != std::string::npos) {
    check_segment_name(rest, "place");
    return named(rest);
  }
  if (kind == "memfd" && !rest.empty()) {
    server_address(rest);  // checks the id's characters
    return served(rest);
  }
  throw InvalidArgument("place: expected 'posix:<name>' or 'memfd:<server id>', got '" + text.substr(0, 80) + "'");
}

namespace {

// What an attaching rank checks of the header before it believes a word of
// it: every size and offset that the session and its data path derive
// addresses from, against the segment's real size.
void check_header(const ShmSegment& seg, int world, ShmTransport transport, const std::string& who,
                  const std::string& what) {
  const Header* h = static_cast<const Header*>(seg.data());
  const auto fail = [&](const std::string& why) {
    throw CommError(who + ": " + what + " is not a pycomm segment for this group (" + why +
                    "): a stale or foreign segment?");
  };
  if (seg.size() < sizeof(Header) || h->magic.load(std::memory_order_acquire) != kSegmentMagic) fail("no pycomm header");
  if (h->version != kLayoutVersion) {
    fail("layout version " + std::to_string(h->version) + ", this pycomm's is " + std::to_string(kLayoutVersion));
  }
  if (h->world != uint32_t(world)) fail("made for " + std::to_string(h->world) + " ranks, not " + std::to_string(world));
  if (h->transport != uint32_t(transport)) fail("made for another transport");
  if (h->total_bytes != seg.size() || h->data_offset != data_region_offset(world) ||
      h->data_bytes > seg.size() - std::min(seg.size(), size_t(h->data_offset)) ||
      Session::segment_bytes(world, DataRegion{size_t(h->data_bytes), {}}) != seg.size()) {
    fail("its sizes do not add up to its " + std::to_string(seg.size()) + " bytes");
  }
  if (strnlen(h->group_id, sizeof(h->group_id)) == sizeof(h->group_id)) fail("its group id is not terminated");
}

}  // namespace

std::unique_ptr<Session> Session::create(int rank, int world, const SegmentPlace& place,
                                         const WaitPolicy& policy, const DataRegion& data) {
  check_args(rank, world);
  const size_t data_offset = data_region_offset(world);
  const size_t total = segment_bytes(world, data);
  const bool memfd = place.transport == ShmTransport::kMemfd;
  // The group's id names its channels (posix) and tags its memfds.
  const std::string group_id = new_group_id();
  ShmSegment seg = memfd ? ShmSegment::create_anonymous(group_id, total) : ShmSegment::create(place.name, total);
  // The pages were reserved zeroed: every counter starts at 0.
  Header* h = static_cast<Header*>(seg.data());
  h->version = kLayoutVersion;
  h->world = uint32_t(world);
  h->total_bytes = total;
  h->data_offset = data_offset;
  h->data_bytes = data.bytes;
  for (int i = 0; i < kDataParams; ++i) h->data_params[i] = data.params[i];
  h->transport = uint32_t(place.transport);
  static_assert(sizeof(h->group_id) > 32, "a group id is 32 hex digits");
  std::snprintf(h->group_id, sizeof(h->group_id), "%s", group_id.c_str());
  // Made here, kept here: only a rank that maps this segment ever sees it.
  const GroupSecret secret = new_group_secret();
  std::memcpy(h->secret, secret.data(), sizeof(h->secret));
  h->magic.store(kSegmentMagic, std::memory_order_release);
  std::unique_ptr<Session> session(
      new Session(rank, world, std::make_shared<ShmSegment>(std::move(seg)), policy));
  if (memfd) {
    if (!place.members.empty() && place.members.size() != size_t(world)) {
      throw InvalidArgument("place: " + std::to_string(place.members.size()) + " member digests for " +
                            std::to_string(world) + " ranks");
    }
    session->count_in(place.server);
    session->server_->admit_members(place.members);
    session->server_->offer(kSessionKey, session->segment_->fd());
  } else {
    session->count_in();
  }
  return session;
}

size_t Session::segment_bytes(int world, const DataRegion& data) {
  const char* what = "the session segment's size";
  return checked_add(data_region_offset(world), checked_align_up(data.bytes, 4096, what), what);
}

std::unique_ptr<Session> Session::join(int rank, const Session& creator) {
  check_args(rank, creator.world_);
  std::unique_ptr<Session> session(new Session(rank, creator.world_, creator.segment_, creator.policy_));
  session->count_in();
  return session;
}

std::unique_ptr<Session> Session::attach(int rank, int world, const SegmentPlace& place,
                                         const WaitPolicy& policy) {
  check_args(rank, world);
  const std::string who = "rank " + std::to_string(rank);
  ShmSegment seg;
  std::string what;
  if (place.transport == ShmTransport::kMemfd) {
    what = "rank 0's session segment";
    const uint64_t deadline = monotonic_ns() + uint64_t(policy.timeout_s * 1e9);
    const int fd = core::fetch_segment(server_address(place.server), place.token, kSessionKey, rank, deadline,
                                       who + ": fetching " + what);
    seg = ShmSegment::from_fd(fd, what);
  } else {
    what = "shared memory " + place.name;
    seg = ShmSegment::open(place.name);
  }
  check_header(seg, world, place.transport, who, what);
  std::unique_ptr<Session> session(
      new Session(rank, world, std::make_shared<ShmSegment>(std::move(seg)), policy));
  session->count_in();
  return session;
}

Session::Session(int rank, int world, std::shared_ptr<ShmSegment> segment, const WaitPolicy& policy)
    : rank_(rank), world_(world), segment_(std::move(segment)), policy_(policy),
      timeout_s_(policy.timeout_s) {
  control(rank_).own.pid_ns.store(pid_namespace(), std::memory_order_relaxed);
  control(rank_).own.pid.store(int32_t(getpid()), std::memory_order_release);
}

void Session::count_in(const std::string& server_id) {
  if (transport() == ShmTransport::kMemfd) {
    // Bound before anyone can learn the name (peers read it only once this
    // rank counted itself in, below), so nobody can take it first.
    const std::string id = server_id.empty() ? new_group_id() : server_id;
    server_ = std::make_unique<SegmentServer>(server_address(id), secret());
    ServerLine& line = control(rank_).server;
    std::snprintf(line.id, sizeof(line.id), "%s", id.c_str());
  }
  header().attached.fetch_add(1, std::memory_order_acq_rel);
}

Session::~Session() = default;

GroupSecret Session::secret() const {
  GroupSecret s;
  std::memcpy(s.data(), header().secret, s.size());
  return s;
}

std::string Session::server_of(int owner) const {
  const ServerLine& line = control(owner).server;
  // Written by the owner, a rank of the group; still bounded and checked
  // (server_address() takes plain ids only) before it is used.
  return server_address(std::string(line.id, strnlen(line.id, sizeof(line.id))));
}

void Session::unlink_name() {
  if (transport() == ShmTransport::kPosix) {
    segment_->unlink();
    return;
  }
  std::lock_guard<std::mutex> lock(server_mu_);
  if (server_) server_->withdraw(kSessionKey);
}

std::string Session::segment_name(int owner, uint64_t key) const {
  // Named after its maker's process, so that remove_stale_segments() finds
  // what a killed maker left.
  const OwnerLine& own = control(owner).own;
  return segment_name_prefix(own.pid.load(std::memory_order_acquire), own.pid_ns.load(std::memory_order_relaxed)) +
         header().group_id + "-" + std::to_string(owner) + "-" + std::to_string(key);
}

ShmSegment Session::make_segment(uint64_t key, size_t bytes) {
  if (transport() == ShmTransport::kPosix) return ShmSegment::create(segment_name(rank_, key), bytes);
  ShmSegment seg = ShmSegment::create_anonymous(std::string(header().group_id) + "-" +
                                                    std::to_string(rank_) + "-" + std::to_string(key),
                                                bytes);
  offer_segment(key, seg.fd(), 1);  // one peer takes it; nobody else, even with the secret
  seg.close_fd();  // the server holds its own
  return seg;
}

void Session::offer_segment(uint64_t key, int fd, uint32_t uses) {
  if (transport() != ShmTransport::kMemfd) {
    throw CommError("rank " + std::to_string(rank_) +
                    ": offering a segment by its descriptor needs the memfd transport; this group took posix");
  }
  std::lock_guard<std::mutex> lock(server_mu_);
  server_->offer(key, fd, uses);
}

void Session::withdraw_segment(uint64_t key) {
  std::lock_guard<std::mutex> lock(server_mu_);
  if (server_) server_->withdraw(key);
}

ShmSegment Session::fetch_segment(int owner, uint64_t key) {
  const std::string what = "rank " + std::to_string(owner) + "'s segment " + std::to_string(key);
  if (transport() == ShmTransport::kPosix) {
    ShmSegment seg = ShmSegment::open(segment_name(owner, key));
    seg.unlink();  // both ranks map it: nobody needs the name any more
    return seg;
  }
  const uint64_t deadline = monotonic_ns() + uint64_t(timeout_s() * 1e9);
  // A dead owner's address may still take connections (a child it forked
  // holds the socket): stop waiting once the session is aborted or a peer is gone.
  const std::string who = "rank " + std::to_string(rank_) + ": fetching " + what;
  auto still_waiting = [&] {
    if (aborted()) throw CommError(aborted_message("fetching " + what));
    if (watch_.first_dead() >= 0) throw CommError(who + ": a peer exited");
  };
  ShmSegment seg = ShmSegment::from_fd(
      core::fetch_segment(server_of(owner), secret(), key, rank_, deadline, who, still_waiting),
      what);
  seg.close_fd();  // only its maker offers it
  return seg;
}

void Session::start() {
  if (header().attached.load(std::memory_order_acquire) != uint32_t(world_)) {
    throw CommError("rank " + std::to_string(rank_) +
                    ": not every rank attached to the shared memory segment");
  }
  // A peer in another PID namespace is not watched (its pid means another
  // process here): its death is seen at the deadline instead.
  std::vector<pid_t> pids(static_cast<size_t>(world_));
  const uint64_t my_ns = pid_namespace();
  for (int r = 0; r < world_; ++r) {
    const pid_t pid = pid_t(control(r).own.pid.load(std::memory_order_acquire));
    const bool same = my_ns != 0 && control(r).own.pid_ns.load(std::memory_order_relaxed) == my_ns;
    pids[size_t(r)] = same ? pid : 0;  // an unknown namespace is not assumed to be ours
  }
  watch_.watch(pids, getpid());
}

void Session::begin(const char* what) {
  what_ = what;
  if (aborted()) fail_aborted();
  deadline_ns_ = monotonic_ns() + uint64_t(timeout_s() * 1e9);
}

void Session::handshake(const Fingerprint& fp) {
  const uint64_t seq = arrived_ + 1;
  OwnerLine& me = control(rank_).own;
  me.fingerprint[seq & 1] = fp;
  arrived_ = seq;
  publish(me.arrived, seq, rank_);
  for (int r = 0; r < world_; ++r) {
    if (r != rank_) wait_at_least(control(r).own.arrived, seq, r, r, "to enter");
  }
  // A rank that stalled past its peers' deadline learns of it here, before it
  // reads anything they published.
  if (aborted()) fail_aborted();

  // Every rank reads the same fingerprints, so every rank raises the same error.
  auto fp_of = [&](int r) -> const Fingerprint& { return control(r).own.fingerprint[seq & 1]; };
  bool same = true;
  for (int r = 1; r < world_ && same; ++r) same = fp_of(r) == fp_of(0);
  if (same) return;
  // Blame a rank that left the majority (ties: the lowest rank's call wins),
  // so that an odd rank 0 is named rather than everyone else.
  int reference = 0, most = 0;
  for (int r = 0; r < world_; ++r) {
    int agree = 0;
    for (int q = 0; q < world_; ++q) agree += fp_of(q) == fp_of(r);
    if (agree > most) most = agree, reference = r;
  }
  // No "rank R:" in front: every rank raises the very same message.
  std::ostringstream os;
  os << "collective #" << seq << " does not match across ranks";
  for (int r = 0; r < world_; ++r) {
    if (fp_of(r) != fp_of(reference)) {
      os << " (" << first_difference(fp_of(reference), fp_of(r)) << " differs on rank " << r << ")";
      break;
    }
  }
  os << ":";
  for (int r = 0; r < world_; ++r) {
    os << (r ? "," : "") << " rank " << r << " called " << describe(fp_of(r));
  }
  fail_mismatch(os.str());
}

void Session::fail_mismatch(const std::string& message) const { throw CollectiveMismatch(message); }

void Session::publish(std::atomic<uint64_t>& word, uint64_t value, int writer) {
  // seq_cst store then seq_cst load: either this rank sees the sleeper, or the
  // sleeper's re-check (also seq_cst) sees the new value. No lost wake-up.
  word.store(value, std::memory_order_seq_cst);
  if (control(writer).sleep.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(word);
}

void Session::wait_at_least(const std::atomic<uint64_t>& word, uint64_t target, int writer,
                            int peer, const char* waiting_for, bool mid_stream) {
  if (word.load(std::memory_order_acquire) >= target) return;
  PartTimer timer(CallPart::kWait);
  const uint64_t start = monotonic_ns();
  const double spin_us = mid_stream ? policy_.stream_spin_us : policy_.spin_us;
  const uint64_t spin_end = start + uint64_t(spin_us * 1e3);
  const uint64_t yield_end = spin_end + uint64_t(policy_.yield_us * 1e3);
  uint64_t now = start;
  while (now < spin_end) {
    for (int i = 0; i < 64; ++i) {
      if (word.load(std::memory_order_acquire) >= target) return;
      cpu_relax();
    }
    now = monotonic_ns();
  }
  uint64_t next_liveness = now;
  std::atomic<uint32_t>& sleepers = control(writer).sleep.sleepers;
  for (;;) {
    if (word.load(std::memory_order_acquire) >= target) return;
    now = monotonic_ns();
    if (aborted()) fail_aborted();
    if (now >= next_liveness) {
      int dead = watch_.first_dead();
      if (dead >= 0) fail_dead(dead);
      next_liveness = now + kLivenessEveryNs;
    }
    if (now >= deadline_ns_) fail_timeout(peer, waiting_for);
    if (now < yield_end) {
      sched_yield();
      continue;
    }
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint64_t seen = word.load(std::memory_order_seq_cst);
    if (seen < target) {
      futex_wait(word, uint32_t(seen), std::min(kSleepSliceNs, deadline_ns_ - now));
    }
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void Session::check_alive() {
  if (aborted()) fail_aborted();
  const int dead = watch_.first_dead();
  if (dead >= 0) fail_dead(dead);
}

uint64_t Session::remaining_ns() const {
  const uint64_t now = monotonic_ns();
  return now < deadline_ns_ ? deadline_ns_ - now : 0;
}

bool Session::aborted() const {
  return header().abort_state.load(std::memory_order_acquire) != uint32_t(AbortState::kHealthy);
}

std::string Session::where() const {
  std::ostringstream os;
  os << what_ << " #" << arrived_;
  return os.str();
}

std::string Session::abort(const std::string& reason, int dead_peer) {
  Header& h = header();
  uint32_t expected = uint32_t(AbortState::kHealthy);
  if (h.abort_state.compare_exchange_strong(expected, uint32_t(AbortState::kWriting),
                                            std::memory_order_acq_rel)) {
    h.abort_by = rank_;
    h.abort_dead = dead_peer;
    std::snprintf(h.abort_reason, sizeof(h.abort_reason), "%s", reason.c_str());
    h.abort_state.store(uint32_t(AbortState::kAborted), std::memory_order_release);
    // Wake the handshake's sleepers so each sees the abort now; a data path's
    // sleepers see it at their next slice (kSleepSliceNs).
    for (int r = 0; r < world_; ++r) {
      futex_wake_all(control(r).own.arrived);
    }
  }
  return reason;
}

std::string Session::aborted_message(const std::string& what) const {
  Header& h = header();
  // The aborting rank fills the reason between kWriting and kAborted.
  const uint64_t give_up = monotonic_ns() + 100'000'000;
  while (h.abort_state.load(std::memory_order_acquire) != uint32_t(AbortState::kAborted) &&
         monotonic_ns() < give_up) {
    sched_yield();
  }
  std::ostringstream os;
  os << "rank " << rank_ << ": " << what << " failed: the communicator was aborted";
  // The reason is read only once it is whole (acquired above); a rank that
  // stalled mid-write leaves it unread rather than raced.
  if (h.abort_state.load(std::memory_order_acquire) == uint32_t(AbortState::kAborted)) {
    os << " by rank " << h.abort_by << ": " << h.abort_reason;
  } else {
    os << " (the aborting rank has not finished writing its reason)";
  }
  return os.str();
}

std::exception_ptr Session::aborted_error(const std::string& what) const {
  const std::string message = aborted_message(what);
  // abort_dead is written before kAborted (release), which aborted_message acquired.
  const Header& h = header();
  if (h.abort_state.load(std::memory_order_acquire) == uint32_t(AbortState::kAborted) && h.abort_dead >= 0) {
    return std::make_exception_ptr(PeerDied(message));
  }
  return std::make_exception_ptr(CommTimeout(message));
}

void Session::fail_aborted() const { std::rethrow_exception(aborted_error(what_)); }

void Session::fail_dead(int peer) {
  std::ostringstream os;
  os << "rank " << rank_ << ": rank " << peer << " (pid " << watch_.pid_of(peer) << ") exited during "
     << where() << ": its process is gone (killed, crashed or ended), seen at once, not at the timeout";
  throw PeerDied(abort(os.str(), peer));
}

void Session::fail_timeout(int peer, const char* waiting_for) {
  // Name the ranks that never entered this collective; if all did, the one this
  // rank was waiting on.
  std::ostringstream missing;
  int count = 0;
  for (int r = 0; r < world_; ++r) {
    const uint64_t a = control(r).own.arrived.load(std::memory_order_acquire);
    if (r != rank_ && a < arrived_) {
      // `a` counts the collectives rank r entered: 0 is none yet.
      missing << (count++ ? ", " : "") << "rank " << r;
      if (a == 0) {
        missing << " (it has entered no collective on this communicator yet)";
      } else {
        missing << " (the last it entered is #" << a << ")";
      }
    }
  }
  std::ostringstream os;
  // "Timed out", as torch's backends and stores say it: tools match that text
  // (PyTorch's own suite matches " (Timed out|closed|timeout) ").
  os << "rank " << rank_ << ": " << where() << ": Timed out after " << timeout_s() << " s, ";
  if (count) {
    os << "still waiting for " << missing.str() << " to enter";
  } else {
    os << "still waiting for rank " << peer << " " << waiting_for;
  }
  throw CommTimeout(abort(os.str()));
}

}  // namespace pycomm::core
