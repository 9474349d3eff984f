// Reduce to a root: every rank copies each piece into its slot; after the
// handshake the root combines all slots in rank order. The other ranks'
// tensors are left as they were.
#include <algorithm>

#include "../errors.h"
#include "../kernels/reduce_kernels.h"
#include "collectives.h"

namespace pycomm::core {

void reduce(const Context& ctx, const ReduceArgs& a) {
  ctx.session.begin("reduce");
  const int world = ctx.session.world();
  if (a.root < 0 || a.root >= world) throw InvalidArgument("root: out of range for this group");
  const bool is_root = ctx.session.rank() == a.root;
  const int divisor = a.divisor > 0 ? a.divisor : world;
  const Fingerprint fp = fingerprint_of(CollectiveKind::kReduce, a.count, a.dtype,
                                        Algorithm::kDirect, &a.op, divisor, a.root);
  const size_t esize = dtype_size(a.dtype);
  const size_t piece = ctx.path.slot_bytes() / esize;
  char* data = static_cast<char*>(a.data);
  ctx.backup.begin(a.data, a.count * esize, a.restore && is_root);
  try {
    size_t done = 0;
    do {
      const size_t n = std::min(a.count - done, piece);
      team_copy(ctx.team, ctx.path.next_slot(), data + done * esize, n * esize);
      ctx.session.handshake(fp);
      if (is_root) {
        if (n < a.count) ctx.backup.save(done * esize, n * esize);
        team_reduce_sources(ctx.team, a.dtype, a.op, data + done * esize, ctx.path.slots(), world, n, divisor);
      }
      done += n;
    } while (done < a.count);
  } catch (const CommError&) {
    ctx.backup.restore();
    throw;
  }
}

}  // namespace pycomm::core
