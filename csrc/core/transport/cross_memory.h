// Cross-memory attach (CMA): a rank copies straight out of a peer's own
// memory with process_vm_readv, one copy where the shared-memory data path
// (shm_data_path.h) takes two (into a slot or link, then out of it). The
// single-copy collectives (routing.h: Algorithm::kSingleCopy) and large
// point-to-point messages (p2p_engine.h) use it; the staging path stays
// for small messages and for groups that cannot use it.
//
// Chosen once per group at set-up (agree()): every rank publishes a probe
// word of its own memory in the session's segment, reads every peer's with
// process_vm_readv and compares it with the value the peer published, and the
// group takes CMA only if every rank could read every peer and none turned it
// off (PYCOMM_SINGLE_COPY). The kernel refuses it across users, to a process
// that is not dumpable, under seccomp profiles without process_vm_readv, in
// another PID namespace and under Yama's ptrace_scope 2 or 3; ptrace_scope 1
// admits only a reader the target names, so there a rank names its one peer
// (PR_SET_PTRACER, never "any"), which a group of two can do and a larger one
// cannot. Every rank reaches the same answer, and a refused probe falls back
// to staging on every rank alike.
//
// What a peer may read: only ranges the owner announced for the current
// collective (in its slot, before the handshake that opens the collective),
// and only until the handshake that closes it, after which the owner may
// return and reuse its memory. A rank never writes into a peer's memory: a
// peer that stalls past the deadline and resumes later can then corrupt
// nothing but its own output, which its next wait reports as failed.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "session.h"

namespace pycomm::core {

// The single_copy setting (settings.h): auto takes CMA where the probe
// succeeds, cma requires it (set-up fails, naming why, where it cannot be
// had), off never takes it.
enum class SingleCopy : uint8_t { kAuto, kCma, kOff };
// "auto", "cma" or "off"; false for anything else.
bool parse_single_copy(const std::string& name, SingleCopy* out);

// Why two processes of this user on this host cannot read each other's
// memory, or "" where they can: a forked child reads a word of this process
// (named its reader first where Yama asks for that), as a group's probe
// would. Groups of more than two ranks also need Yama's ptrace_scope below 1
// (yama_ptrace_scope()). For pycomm doctor; a group probes its own peers.
std::string single_copy_unavailable_reason();
// Yama's ptrace_scope, or -1 where Yama is not there.
int yama_ptrace_scope();

class CrossMemory {
 public:
  explicit CrossMemory(Session& session);
  ~CrossMemory();  // withdraws a PR_SET_PTRACER grant this group made
  CrossMemory(const CrossMemory&) = delete;
  CrossMemory& operator=(const CrossMemory&) = delete;

  // Collective, once, after Session::start(): probes every peer and agrees
  // with every rank whether the group takes CMA (see above). Bounded by the
  // session's timeout. Throws CommError naming why on every rank when `mode`
  // is kCma and the group cannot take it.
  void agree(SingleCopy mode);

  bool enabled() const { return enabled_; }
  // Why the group takes CMA or not, for pycomm doctor and the errors.
  const std::string& reason() const { return reason_; }

  // Copies `bytes` from address `remote` of `peer`'s memory into `local`.
  // Throws PeerDied when the peer's process is gone, CommError when the
  // kernel refuses or the range is not mapped there; either way the session
  // is aborted first, so every rank fails. Only for ranges the peer announced.
  void read(int peer, void* local, uint64_t remote, size_t bytes) const;

 private:
  [[noreturn]] void fail_read(int peer, int error, size_t done, size_t bytes) const;

  Session& session_;
  std::vector<pid_t> pids_;
  // The word peers read at the probe; on the heap, so that its address stays
  // put whatever happens to this object.
  std::unique_ptr<uint64_t> probe_;
  bool granted_ptracer_ = false;
  bool enabled_ = false;
  std::string reason_ = "not probed yet";
};

}  // namespace pycomm::core
