// All-gather: one shot through the slots (each rank's piece, then every slot
// copied out) for small messages; the all-gather half of the ring for large
// ones. Out of place: the input is never written (unless it is the output's
// own chunk, which receives the same values).
#include <algorithm>

#include "../errors.h"
#include "collectives.h"
#include "ring.h"

namespace pycomm::core {

void all_gather(const Context& ctx, const AllGatherArgs& a) {
  ctx.session.begin("all_gather");
  const int world = ctx.session.world();
  const size_t esize = dtype_size(a.dtype);
  check_host_algorithm("all_gather", a.algorithm);
  const Algorithm algo = a.algorithm;
  const Fingerprint fp = fingerprint_of(CollectiveKind::kAllGather, a.count, a.dtype, algo);
  const char* in = static_cast<const char*>(a.input);
  char* out = static_cast<char*>(a.output);
  if (algo == Algorithm::kRing && world > 1 && a.count > 0) {
    ctx.session.handshake(fp);
    RingJob job;
    job.dtype = a.dtype;
    job.count = a.count * size_t(world);
    job.all_gather = true;
    job.output = out;
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
      team_copy(ctx.team, out + (size_t(r) * a.count + done) * esize, ctx.path.slot(r), n * esize);
    }
    done += n;
  } while (done < a.count);
}

}  // namespace pycomm::core
