#include "cross_memory.h"

#include <errno.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "../call_profile.h"
#include "../errors.h"
#include "../named_choice.h"

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif

namespace pycomm::core {
namespace {

// Why a rank cannot take CMA (ProbeLine::refusal).
enum Refusal : uint32_t {
  kReadsEveryPeer = 0,
  kTurnedOff = 1,        // its single_copy setting is off
  kOtherNamespace = 2,   // a peer's pid means another process here
  kYamaOnePeer = 3,      // ptrace_scope 1 and more than one peer to name
  kYamaAdminOnly = 4,    // ptrace_scope 2 or 3
  kPtracerTaken = 5,     // ptrace_scope 1, and another group of this process named another peer
  kReadFailed = 6,       // process_vm_readv of a peer's probe word failed (errno)
  kWrongValue = 7,       // it read something else than the peer published
};

}  // namespace

// Where Yama is not there, the classic rule holds: the same user, a dumpable process.
int yama_ptrace_scope() {
  std::ifstream f("/proc/sys/kernel/yama/ptrace_scope");
  int v = -1;
  if (!(f >> v)) return -1;
  return v;
}

namespace {

// Yama lets a process name one reader. Every group of this process that needs
// one shares the grant: it can name only the one peer they all have.
std::mutex g_ptracer_mu;
pid_t g_ptracer = 0;
int g_ptracer_users = 0;

bool grant_ptracer(pid_t reader) {
  std::lock_guard<std::mutex> lock(g_ptracer_mu);
  if (g_ptracer != 0 && g_ptracer != reader) return false;
  if (g_ptracer == 0 && prctl(PR_SET_PTRACER, reader, 0, 0, 0) != 0) return false;
  g_ptracer = reader;
  ++g_ptracer_users;
  return true;
}

void withdraw_ptracer() {
  std::lock_guard<std::mutex> lock(g_ptracer_mu);
  if (--g_ptracer_users > 0) return;
  prctl(PR_SET_PTRACER, 0, 0, 0, 0);
  g_ptracer = 0;
}

std::string describe_refusal(int rank, const ProbeLine& line) {
  std::ostringstream os;
  os << "rank " << rank << " ";
  const int peer = line.refused_peer;
  switch (line.refusal) {
    case kTurnedOff:
      os << "has PYCOMM_SINGLE_COPY=off";
      break;
    case kOtherNamespace:
      os << "sees rank " << peer << " in another PID namespace, where its pid names no process here";
      break;
    case kYamaOnePeer:
      os << "runs under Yama's ptrace_scope 1, which lets a process name one reader, and has "
            "more than one peer (pycomm never allows any process to read it)";
      break;
    case kYamaAdminOnly:
      os << "runs under Yama's ptrace_scope 2 or 3 (only an administrator may read another process)";
      break;
    case kPtracerTaken:
      os << "runs under Yama's ptrace_scope 1 and already named another group's peer as its one reader";
      break;
    case kReadFailed:
      os << "could not read rank " << peer << "'s memory: " << std::strerror(line.error)
         << (line.error == EPERM || line.error == EACCES
                 ? " (another user, a process that is not dumpable, or a seccomp profile)"
                 : line.error == ENOSYS ? " (process_vm_readv is not available here)" : "");
      break;
    case kWrongValue:
      os << "read another value than rank " << peer << " published at its probe word";
      break;
    default:
      os << "gave an unknown answer (" << line.refusal << ")";
  }
  return os.str();
}

}  // namespace

std::string single_copy_unavailable_reason() {
  static const uint64_t word = 0x70796361u;
  int go[2];
  if (pipe(go) != 0) return std::string("pipe failed: ") + std::strerror(errno);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    close(go[0]), close(go[1]);
    return std::string("fork failed: ") + std::strerror(errno);
  }
  if (child == 0) {
    // Only async-signal-safe calls here: this process may hold others' locks.
    close(go[1]);
    char c;
    if (::read(go[0], &c, 1) != 1) _exit(255);
    uint64_t seen = 0;
    iovec local{&seen, sizeof(seen)};
    iovec remote{const_cast<uint64_t*>(&word), sizeof(seen)};
    if (process_vm_readv(parent, &local, 1, &remote, 1, 0) != ssize_t(sizeof(seen))) _exit(errno & 0x7f);
    _exit(seen == word ? 0 : 254);
  }
  close(go[0]);
  // Under ptrace_scope 1 a group names its peer; so does this probe, unless a
  // group of this process named one already (whose grant it leaves alone).
  bool named = false;
  if (yama_ptrace_scope() == 1) {
    std::lock_guard<std::mutex> lock(g_ptracer_mu);
    named = g_ptracer == 0 && prctl(PR_SET_PTRACER, child, 0, 0, 0) == 0;
  }
  const char c = 1;
  const bool told = ::write(go[1], &c, 1) == 1;
  close(go[1]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (named) prctl(PR_SET_PTRACER, 0, 0, 0, 0);
  if (!told || !WIFEXITED(status)) return "the probe's child did not run to its end";
  const int code = WEXITSTATUS(status);
  if (code == 0) return "";
  if (code == 254) return "the child read another value than this process holds";
  std::string why = std::string("process_vm_readv: ") + std::strerror(code);
  if (code == EPERM || code == EACCES) {
    why += yama_ptrace_scope() >= 2 ? " (Yama's ptrace_scope 2 or 3: only an administrator may read another process)"
                                    : " (a seccomp profile, or a process that is not dumpable)";
  } else if (code == ENOSYS) {
    why += " (not available in this kernel or container)";
  }
  return why;
}

bool parse_single_copy(const std::string& name, SingleCopy* out) {
  static constexpr std::pair<const char*, SingleCopy> kNames[] = {
      {"auto", SingleCopy::kAuto}, {"cma", SingleCopy::kCma}, {"off", SingleCopy::kOff}};
  return parse_named_choice(name, kNames, out);
}

CrossMemory::CrossMemory(Session& session) : session_(session), probe_(std::make_unique<uint64_t>(0)) {}

CrossMemory::~CrossMemory() {
  if (granted_ptracer_) withdraw_ptracer();
}

void CrossMemory::agree(SingleCopy mode) {
  const int rank = session_.rank(), world = session_.world();
  pids_.assign(size_t(world), 0);
  for (int r = 0; r < world; ++r) pids_[size_t(r)] = session_.pid_of(r);
  ProbeLine& mine = session_.probe_line(rank);
  uint32_t refusal = kReadsEveryPeer;
  int refused_peer = -1, error = 0;
  for (int r = 0; r < world && refusal == kReadsEveryPeer; ++r) {
    if (r != rank && pids_[size_t(r)] <= 0) refusal = kOtherNamespace, refused_peer = r;
  }
  if (mode == SingleCopy::kOff) refusal = kTurnedOff;
  // Threads of one process (the native tests) read their own memory: no grant.
  bool one_process = true;
  for (pid_t p : pids_) one_process = one_process && p == getpid();
  const int scope = yama_ptrace_scope();
  if (refusal == kReadsEveryPeer && scope >= 2) refusal = kYamaAdminOnly;
  if (refusal == kReadsEveryPeer && scope == 1 && !one_process) {
    if (world != 2) {
      refusal = kYamaOnePeer;
    } else if (grant_ptracer(pids_[size_t(1 - rank)])) {
      granted_ptracer_ = true;
    } else {
      refusal = kPtracerTaken, refused_peer = 1 - rank;
    }
  }
  std::random_device random;
  *probe_ = (uint64_t(random()) << 32) ^ random() ^ 1;  // never 0: an unset line reads 0
  mine.address = reinterpret_cast<uint64_t>(probe_.get());
  mine.value = *probe_;
  session_.begin("set-up (cross-memory probe)");
  session_.publish(mine.stage, 1, rank);
  for (int r = 0; r < world; ++r) {
    if (r != rank) session_.wait_at_least(session_.probe_line(r).stage, 1, r, r, "to publish its probe word");
  }
  for (int r = 0; r < world && refusal == kReadsEveryPeer; ++r) {
    if (r == rank) continue;
    const ProbeLine& theirs = session_.probe_line(r);
    uint64_t seen = 0;
    iovec local{&seen, sizeof(seen)};
    iovec remote{reinterpret_cast<void*>(theirs.address), sizeof(seen)};
    if (process_vm_readv(pids_[size_t(r)], &local, 1, &remote, 1, 0) != ssize_t(sizeof(seen))) {
      refusal = kReadFailed, refused_peer = r, error = errno;
    } else if (seen != theirs.value) {
      refusal = kWrongValue, refused_peer = r;
    }
  }
  mine.refusal = refusal;
  mine.refused_peer = refused_peer;
  mine.error = error;
  mine.required = mode == SingleCopy::kCma;
  session_.publish(mine.stage, 2, rank);
  for (int r = 0; r < world; ++r) {
    if (r != rank) session_.wait_at_least(session_.probe_line(r).stage, 2, r, r, "to finish its probe");
  }
  // Every rank reads the same lines in the same order: the same answer everywhere.
  enabled_ = true;
  reason_.clear();
  for (int r = 0; r < world && enabled_; ++r) {
    const ProbeLine& line = session_.probe_line(r);
    if (line.refusal != kReadsEveryPeer) {
      enabled_ = false;
      reason_ = describe_refusal(r, line);
    }
  }
  if (enabled_) {
    reason_ = world == 1 ? "one rank: nothing to read" : "every rank reads every peer's memory";
    if (granted_ptracer_) reason_ += " (Yama ptrace_scope 1: each rank named its one peer)";
  }
  // A rank that requires it fails set-up where it cannot be had, and so does
  // every other rank: none is left waiting for a group the others gave up.
  int requiring = -1;
  for (int r = 0; r < world && requiring < 0; ++r) {
    if (session_.probe_line(r).required) requiring = r;
  }
  if (requiring >= 0 && !enabled_) {
    throw CommError("rank " + std::to_string(rank) + ": PYCOMM_SINGLE_COPY=cma on rank " + std::to_string(requiring) +
                    ", but the group cannot read its peers' memory: " + reason_ + " (auto falls back to staging)");
  }
}

void CrossMemory::read(int peer, void* local, uint64_t remote, size_t bytes) const {
  const PartTimer timer(CallPart::kCrossMemory);
  size_t done = 0;
  while (done < bytes) {
    iovec l{static_cast<char*>(local) + done, bytes - done};
    iovec r{reinterpret_cast<void*>(remote + done), bytes - done};
    const ssize_t n = process_vm_readv(pids_[size_t(peer)], &l, 1, &r, 1, 0);
    if (n > 0) {
      done += size_t(n);  // a short read: a later page faulted; the next call says why
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      fail_read(peer, n < 0 ? errno : EFAULT, done, bytes);
    }
  }
}

void CrossMemory::fail_read(int peer, int error, size_t done, size_t bytes) const {
  // The peer's process is gone (ESRCH: it exited, or only its zombie is left).
  if (error == ESRCH) session_.fail_dead(peer);
  // A peer that failed first (another rank died or timed out) has left the
  // collective and may have freed what it announced: the group's first
  // failure is the reason, not this read's.
  if (session_.aborted()) session_.check_alive();
  std::ostringstream os;
  os << "rank " << session_.rank() << ": reading " << bytes << " bytes of rank " << peer << "'s memory failed after "
     << done << ": " << std::strerror(error)
     << (error == EFAULT ? " (the range it announced is not mapped there: a bug or a rank that freed its tensor)"
                         : "");
  throw CommError(session_.abort(os.str()));
}

}  // namespace pycomm::core
