// Reduce-scatter: rank r ends with chunk r of the input reduced over all ranks.
// One shot through the slots for small messages (each rank posts a piece of
// every chunk; each reduces its own chunk's piece from every slot, in rank
// order); the reduce-scatter half of the ring for large ones; or, where the
// ranks read each other's memory, each rank reduces its chunk straight out of
// every peer's input (single_copy.h), in rank order. Out of place: the input
// is never written.
#include <algorithm>
#include <vector>

#include "../errors.h"
#include "../kernels/reduce_kernels.h"
#include "collectives.h"
#include "ring.h"
#include "single_copy.h"
#include "slot_pieces.h"

namespace pycomm::core {

void reduce_scatter(const Context& ctx, const ReduceScatterArgs& a) {
  ctx.session.begin("reduce_scatter");
  const int world = ctx.session.world();
  const int rank = ctx.session.rank();
  const int divisor = a.divisor > 0 ? a.divisor : world;
  const size_t esize = dtype_size(a.dtype);
  check_host_algorithm("reduce_scatter", a.algorithm, ctx);
  const Algorithm algo = a.algorithm;
  const Fingerprint fp =
      fingerprint_of(FingerprintKind::kReduceScatter, a.count, a.dtype, algo, &a.op, divisor);
  const char* in = static_cast<const char*>(a.input);
  char* out = static_cast<char*>(a.output);
  if (algo == Algorithm::kSingleCopy && world > 1 && a.count > 0) {
    const size_t bytes = a.count * size_t(world) * esize;
    *announce(ctx, 1) = Announced{reinterpret_cast<uint64_t>(in), bytes};
    ctx.session.handshake(fp);
    reduce_from_peers(ctx, a.dtype, a.op, divisor, out, in, announced_by_peers(ctx, bytes), size_t(rank) * a.count,
                      a.count);
    release(ctx, fp);
    return;
  }
  if (algo == Algorithm::kRing && world > 1 && a.count > 0) {
    return ring_reduce_scatter(ctx, fp, a.dtype, a.op, divisor, in, a.count * size_t(world), out);
  }
  // A piece takes `piece` elements of every chunk; the slot holds them chunk
  // after chunk.
  const size_t piece = std::max<size_t>(1, ctx.path.slot_bytes() / (size_t(world) * esize));
  thread_local std::vector<const void*> sources;
  sources.resize(size_t(world));
  for_each_slot_piece(a.count, piece, [&](size_t done, size_t n) {
    char* mine = static_cast<char*>(ctx.path.next_slot());
    for (int c = 0; c < world; ++c) {
      team_copy(ctx.team, mine + size_t(c) * piece * esize, in + (size_t(c) * a.count + done) * esize,
                n * esize);
    }
    ctx.session.handshake(fp);
    for (int r = 0; r < world; ++r) {
      sources[size_t(r)] = static_cast<const char*>(ctx.path.slot(r)) + size_t(rank) * piece * esize;
    }
    team_reduce_sources(ctx.team, a.dtype, a.op, out + done * esize, sources.data(), world, n, divisor);
  });
}

}  // namespace pycomm::core
