// All-gather: one shot through the slots (each rank's piece, then every slot
// copied out) for small messages; the all-gather half of the ring for large
// ones; or, where the ranks read each other's memory, each rank reads every
// peer's input straight into its output (single_copy.h). Out of place: the
// input is never written (unless it is the output's own chunk, which receives
// the same values).
#include <algorithm>
#include <vector>

#include "../errors.h"
#include "collectives.h"
#include "ring.h"
#include "single_copy.h"

namespace pycomm::core {
namespace {

// Where rank r's chunk goes.
char* chunk_out(const AllGatherArgs& a, int r, size_t esize) {
  return a.outputs ? static_cast<char*>(a.outputs[r]) : static_cast<char*>(a.output) + size_t(r) * a.count * esize;
}

void single_copy(const Context& ctx, const AllGatherArgs& a, const Fingerprint& fp) {
  const int world = ctx.session.world(), rank = ctx.session.rank();
  const size_t bytes = a.count * dtype_size(a.dtype);
  *announce(ctx, 1) = Announced{reinterpret_cast<uint64_t>(a.input), bytes};
  ctx.session.handshake(fp);
  char* own = chunk_out(a, rank, dtype_size(a.dtype));
  if (own != a.input) team_copy(ctx.team, own, a.input, bytes);
  // Peers in turn from the next one on, so that they do not all read rank 0 first.
  for (int s = 1; s < world; ++s) {
    const int peer = (rank + s) % world;
    read(ctx, peer, chunk_out(a, peer, dtype_size(a.dtype)), announced_at(ctx, peer, 0, bytes), bytes);
  }
  release(ctx, fp);
}

}  // namespace

void all_gather(const Context& ctx, const AllGatherArgs& a) {
  ctx.session.begin("all_gather");
  const int world = ctx.session.world();
  const size_t esize = dtype_size(a.dtype);
  check_host_algorithm("all_gather", a.algorithm, ctx);
  const Algorithm algo = a.algorithm;
  const Fingerprint fp = fingerprint_of(CollectiveKind::kAllGather, a.count, a.dtype, algo);
  const char* in = static_cast<const char*>(a.input);
  if (algo == Algorithm::kSingleCopy && world > 1 && a.count > 0) return single_copy(ctx, a, fp);
  if (algo == Algorithm::kRing && world > 1 && a.count > 0) {
    if (a.outputs) throw InvalidArgument("all_gather: the ring writes one contiguous output");
    ctx.session.handshake(fp);
    RingJob job;
    job.dtype = a.dtype;
    job.count = a.count * size_t(world);
    job.all_gather = true;
    job.output = static_cast<char*>(a.output);
    job.owned_input = in;
    run_ring(ctx, job);
    return;
  }
  const size_t piece = ctx.path.slot_bytes() / esize;
  size_t done = 0;
  do {
    const size_t n = std::min(a.count - done, piece);
    team_copy(ctx.team, ctx.path.next_slot(), in + done * esize, n * esize);
    ctx.session.handshake(fp);
    for (int r = 0; r < world; ++r) {
      team_copy(ctx.team, chunk_out(a, r, esize) + done * esize, ctx.path.slot(r), n * esize);
    }
    done += n;
  } while (done < a.count);
}

}  // namespace pycomm::core
