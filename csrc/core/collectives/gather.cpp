// Gather. Staging (kDirect): every rank copies a piece of its input into its
// own slot; after the handshake the root copies every rank's piece out
// (staged.h; as in broadcast, whose roles are the other way round). Single
// copy: the root reads every peer's input straight into its output
// (single_copy.h).
#include "../errors.h"
#include "collectives.h"
#include "single_copy.h"
#include "staged.h"

namespace pycomm::core {

void gather(const Context& ctx, const GatherArgs& a) {
  ctx.session.begin("gather");
  const int world = ctx.session.world();
  if (a.root < 0 || a.root >= world) throw InvalidArgument("root: out of range for this group");
  check_staged_or_single_copy("gather", a.algorithm, ctx);
  const bool is_root = ctx.session.rank() == a.root;
  const Fingerprint fp = fingerprint_of(FingerprintKind::kGather, a.count, a.dtype, a.algorithm, nullptr, 0, a.root);
  const size_t esize = dtype_size(a.dtype);
  const char* in = static_cast<const char*>(a.input);
  const RankParts<char> out{a.outputs, a.output, a.count * esize};
  if (a.algorithm == Algorithm::kSingleCopy && world > 1) {
    return gather_single_copy(ctx, fp, in, a.count * esize, out, is_root);
  }
  gather_staged(ctx, fp, a.dtype, in, a.count, out, is_root);
}

}  // namespace pycomm::core
