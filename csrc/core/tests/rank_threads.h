// Ranks as threads of one process: what every native test of several ranks
// runs its ranks with (collective_world.h, p2p_world.h): their sessions, and
// a function run on every rank at once.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../errors.h"
#include "../transport/cross_memory.h"
#include "../transport/session.h"

namespace pycomm::core {

// A group's sessions, rank 0's created at `place` and the others joined to it
// (one mapping), the name unlinked; none started yet.
inline std::vector<std::unique_ptr<Session>> joined_sessions(int world, const SegmentPlace& place,
                                                             const WaitPolicy& wait, const DataRegion& region) {
  std::vector<std::unique_ptr<Session>> sessions;
  sessions.push_back(Session::create(0, world, place, wait, region));
  for (int r = 1; r < world; ++r) sessions.push_back(Session::join(r, *sessions[0]));
  sessions[0]->unlink_name();
  return sessions;
}

// Runs fn(rank) on one thread per rank, 0..n-1, and returns what each threw,
// with its kind in front ("mismatch: ", "timeout: ", "other: "), or "".
inline std::vector<std::string> run_on_threads(size_t n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(int(r));
      } catch (const CollectiveMismatch& e) {
        errors[r] = std::string("mismatch: ") + e.what();
      } catch (const CommTimeout& e) {
        errors[r] = std::string("timeout: ") + e.what();
      } catch (const std::exception& e) {
        errors[r] = std::string("other: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Whether this host lets a process read another's memory (cross_memory.h). A
// test of the single copy returns at once where it does not, saying why: under
// qemu-user (scripts/cross_aarch64.sh), which emulates no process_vm_readv; the
// host's own build runs them all.
inline bool single_copy_here() {
  static const std::string why = single_copy_unavailable_reason();
  if (!why.empty()) std::printf("  skipped: the single copy is unavailable here (%s)\n", why.c_str());
  return why.empty();
}

}  // namespace pycomm::core
