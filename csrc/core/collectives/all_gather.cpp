// All-gather: one shot through the slots (each rank's piece, then every slot
// copied out: staged.h) for small messages; the all-gather half of the ring
// for large ones; or, where the ranks read each other's memory, each rank
// reads every peer's input straight into its output (single_copy.h). Out of
// place: the input is never written (unless it is the output's own chunk,
// which receives the same values).
#include "../errors.h"
#include "collectives.h"
#include "ring.h"
#include "single_copy.h"
#include "staged.h"

namespace pycomm::core {

void all_gather(const Context& ctx, const AllGatherArgs& a) {
  ctx.session.begin("all_gather");
  const int world = ctx.session.world();
  const size_t esize = dtype_size(a.dtype);
  check_host_algorithm("all_gather", a.algorithm, ctx);
  const Algorithm algo = a.algorithm;
  const Fingerprint fp = fingerprint_of(FingerprintKind::kAllGather, a.count, a.dtype, algo);
  const char* in = static_cast<const char*>(a.input);
  const RankParts<char> out{a.outputs, a.output, a.count * esize};
  if (algo == Algorithm::kSingleCopy && world > 1 && a.count > 0) {
    return gather_single_copy(ctx, fp, in, a.count * esize, out, /*collect=*/true);
  }
  if (algo == Algorithm::kRing && world > 1 && a.count > 0) {
    if (a.outputs) throw InvalidArgument("all_gather: the ring writes one contiguous output");
    return ring_all_gather(ctx, fp, a.dtype, static_cast<char*>(a.output), a.count * size_t(world), in);
  }
  gather_staged(ctx, fp, a.dtype, in, a.count, out, /*collect=*/true);
}

}  // namespace pycomm::core
