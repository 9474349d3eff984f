// All-reduce: one-shot through the slots for small messages, the pipelined
// ring (both halves in one pass) for large ones, where the ranks span NUMA
// domains the two-level form (two_level.h), and where they read each other's
// memory the single-copy form (single_copy.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "../errors.h"
#include "../kernels/reduce_kernels.h"
#include "collectives.h"
#include "ring.h"
#include "single_copy.h"
#include "two_level.h"

namespace pycomm::core {
namespace {

// One shot per piece: copy into my slot, handshake, reduce every rank's slot in
// rank order. Pieces only when the tensor is larger than a slot.
void direct(const Context& ctx, const AllReduceArgs& a, const Fingerprint& fp, int divisor) {
  const size_t esize = dtype_size(a.dtype);
  const size_t piece = ctx.path.slot_bytes() / esize;
  const int world = ctx.session.world();
  char* data = static_cast<char*>(a.data);
  size_t done = 0;
  do {
    const size_t n = std::min(a.count - done, piece);
    team_copy(ctx.team, ctx.path.next_slot(), data + done * esize, n * esize);
    ctx.session.handshake(fp);
    // A one-piece collective writes the tensor after its only wait, so it
    // needs no backup; a multi-piece one saves each piece it overwrites.
    if (n < a.count) ctx.backup.save(done * esize, n * esize);
    team_reduce_sources(ctx.team, a.dtype, a.op, data + done * esize, ctx.path.slots(), world, n, divisor);
    done += n;
  } while (done < a.count);
}

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
  thread_local std::vector<uint64_t> theirs;
  theirs.resize(size_t(world));
  for (int r = 0; r < world; ++r) theirs[size_t(r)] = r == rank ? 0 : announced_at(ctx, r, 0, a.count * esize);
  const Range mine = chunk_range(a.count, world, rank);
  ctx.backup.save(mine.begin * esize, mine.size() * esize);
  reduce_from_peers(ctx, a.dtype, a.op, divisor, data + mine.begin * esize, data, theirs.data(), mine.begin,
                    mine.size());
  ctx.session.handshake(fp);
  for (int s = 1; s < world; ++s) {
    const int peer = (rank + s) % world;
    const Range c = chunk_range(a.count, world, peer);
    ctx.backup.save(c.begin * esize, c.size() * esize);
    read(ctx, peer, data + c.begin * esize, theirs[size_t(peer)] + c.begin * esize, c.size() * esize);
  }
  release(ctx, fp);
}

}  // namespace

void all_reduce(const Context& ctx, const AllReduceArgs& a) {
  ctx.session.begin("all_reduce");
  const int world = ctx.session.world();
  const int divisor = a.divisor > 0 ? a.divisor : world;
  const Algorithm algo = a.algorithm;
  Fingerprint fp = fingerprint_of(CollectiveKind::kAllReduce, a.count, a.dtype, algo, &a.op, divisor);
  if (algo == Algorithm::kTwoShot && a.peers) {
    fp.place = a.place;
    two_shot_in_place(ctx, a, fp, divisor);
    return;
  }
  check_host_algorithm("all_reduce", a.algorithm, ctx, /*two_level=*/true);
  ctx.backup.begin(a.data, a.count * dtype_size(a.dtype), a.restore);
  try {
    if (algo == Algorithm::kSingleCopy && world > 1 && a.count > 0) {
      single_copy(ctx, a, fp, divisor);
    } else if (algo == Algorithm::kTwoLevel && world > 1 && a.count > 0) {
      two_level_all_reduce(ctx, a, fp, divisor);
    } else if (algo == Algorithm::kRing && world > 1 && a.count > 0) {
      ctx.session.handshake(fp);
      RingJob job;
      job.dtype = a.dtype;
      job.op = a.op;
      job.divisor = divisor;
      job.count = a.count;
      job.reduce_scatter = job.all_gather = true;
      job.input = static_cast<const char*>(a.data);
      job.output = static_cast<char*>(a.data);
      run_ring(ctx, job);
    } else {
      // One rank, or nothing to move: the direct path still handshakes, so
      // mismatched calls are caught even then.
      direct(ctx, a, fp, divisor);
    }
  } catch (const CommError&) {
    ctx.backup.restore();
    throw;
  }
}

}  // namespace pycomm::core
