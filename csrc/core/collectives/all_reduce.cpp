// All-reduce: one-shot through the slots for small messages, the pipelined
// ring (both halves in one pass) for large ones, where the ranks span NUMA
// domains the two-level form (two_level.h), and where they read each other's
// memory the single-copy form (single_copy.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "../kernels/reduce_kernels.h"
#include "collectives.h"
#include "ring.h"
#include "single_copy.h"
#include "staged.h"
#include "two_level.h"

namespace pycomm::core {
namespace {

// In symmetric memory, in place: after the handshake (every rank's copy is
// written) each rank reduces its share of every copy, in rank order, through a
// small scratch, and writes it into every copy; the second handshake keeps
// every rank in the collective until every share is written. Shares are
// disjoint, so nothing else needs ordering.
void two_shot_in_place(const Context& ctx, const AllReduceArgs& a, const Fingerprint& fp, int divisor) {
  const int world = ctx.session.world();
  const size_t esize = dtype_size(a.dtype);
  const size_t share = (a.count + size_t(world) - 1) / size_t(world);
  const size_t lo = std::min(a.count, share * size_t(ctx.session.rank()));
  const size_t hi = std::min(a.count, lo + share);
  // A piece whose sources and result stay in the core's first-level cache
  // between its reduction and its copies: at 16 MiB and 2 ranks, 16 KiB pieces
  // took 0.6-0.8 of the time 256 KiB or 1 MiB ones took (bench/symm_mem_perf.py).
  constexpr size_t kPieceBytes = size_t(16) << 10;
  const size_t piece = std::max<size_t>(1, kPieceBytes / esize);
  thread_local std::vector<char> scratch;
  scratch.resize(kPieceBytes + esize);
  std::vector<const void*> srcs(world);
  ctx.session.handshake(fp);
  for (size_t first = lo; first < hi; first += piece) {
    const size_t n = std::min(piece, hi - first);
    for (int r = 0; r < world; ++r) srcs[r] = a.peers[r] + first * esize;
    reduce_sources(a.dtype, a.op, scratch.data(), srcs.data(), world, n, divisor);
    for (int r = 0; r < world; ++r) std::memcpy(a.peers[r] + first * esize, scratch.data(), n * esize);
  }
  ctx.session.handshake(fp);
}

// Single copy: each rank reduces its chunk (ring_schedule.h's) straight out
// of every peer's tensor into its own, in rank order; once the middle
// handshake has passed, every chunk is final and nobody reads an input any
// more, and each rank reads every peer's chunk straight into its own tensor.
// Every value is computed once, by the chunk's owner: bitwise equal everywhere.
void single_copy(const Context& ctx, const AllReduceArgs& a, const Fingerprint& fp, int divisor) {
  const int world = ctx.session.world(), rank = ctx.session.rank();
  const size_t esize = dtype_size(a.dtype);
  char* data = static_cast<char*>(a.data);
  *announce(ctx, 1) = Announced{reinterpret_cast<uint64_t>(a.data), a.count * esize};
  ctx.session.handshake(fp);
  const uint64_t* theirs = announced_by_peers(ctx, a.count * esize);
  const Range mine = chunk_range(a.count, world, rank);
  ctx.backup.save(mine.begin * esize, mine.size() * esize);
  reduce_from_peers(ctx, a.dtype, a.op, divisor, data + mine.begin * esize, data, theirs, mine.begin,
                    mine.size());
  ctx.session.handshake(fp);
  for (int s = 1; s < world; ++s) {
    const int peer = (rank + s) % world;
    const Range c = chunk_range(a.count, world, peer);
    ctx.backup.save(c.begin * esize, c.size() * esize);
    read(ctx, peer, data + c.begin * esize, theirs[peer] + c.begin * esize, c.size() * esize);
  }
  release(ctx, fp);
}

}  // namespace

void all_reduce(const Context& ctx, const AllReduceArgs& a) {
  ctx.session.begin("all_reduce");
  const int world = ctx.session.world();
  const int divisor = a.divisor > 0 ? a.divisor : world;
  const Algorithm algo = a.algorithm;
  Fingerprint fp = fingerprint_of(FingerprintKind::kAllReduce, a.count, a.dtype, algo, &a.op, divisor);
  if (algo == Algorithm::kTwoShot && a.peers) {
    fp.place = a.place;
    two_shot_in_place(ctx, a, fp, divisor);
    return;
  }
  check_host_algorithm("all_reduce", a.algorithm, ctx, /*two_level=*/true);
  char* data = static_cast<char*>(a.data);
  restoring_on_failure(ctx.backup, data, a.count * dtype_size(a.dtype), a.restore, [&] {
    if (algo == Algorithm::kSingleCopy && world > 1 && a.count > 0) {
      single_copy(ctx, a, fp, divisor);
    } else if (algo == Algorithm::kTwoLevel && world > 1 && a.count > 0) {
      two_level_all_reduce(ctx, a, fp, divisor);
    } else if (algo == Algorithm::kRing && world > 1 && a.count > 0) {
      ring_all_reduce(ctx, fp, a.dtype, a.op, divisor, data, a.count);
    } else {
      // One rank, or nothing to move: the direct path (one shot per piece)
      // still handshakes, so mismatched calls are caught even then.
      reduce_staged(ctx, fp, a.dtype, a.op, divisor, data, a.count, /*collect=*/true);
    }
  });
}

}  // namespace pycomm::core
