// Reduce to a root: every rank copies each piece into its slot; after the
// handshake the root combines all slots in rank order (staged.h). The other
// ranks' tensors are left as they were.
#include "../errors.h"
#include "collectives.h"
#include "staged.h"

namespace pycomm::core {

void reduce(const Context& ctx, const ReduceArgs& a) {
  ctx.session.begin("reduce");
  const int world = ctx.session.world();
  if (a.root < 0 || a.root >= world) throw InvalidArgument("root: out of range for this group");
  const bool is_root = ctx.session.rank() == a.root;
  const int divisor = a.divisor > 0 ? a.divisor : world;
  const Fingerprint fp = fingerprint_of(FingerprintKind::kReduce, a.count, a.dtype,
                                        Algorithm::kDirect, &a.op, divisor, a.root);
  char* data = static_cast<char*>(a.data);
  restoring_on_failure(ctx.backup, data, a.count * dtype_size(a.dtype), a.restore && is_root, [&] {
    reduce_staged(ctx, fp, a.dtype, a.op, divisor, data, a.count, is_root);
  });
}

}  // namespace pycomm::core
