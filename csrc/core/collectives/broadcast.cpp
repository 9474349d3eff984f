// Broadcast: the root copies each piece into its slot; after the handshake
// every other rank copies it out. The slots' two parities let the root fill
// piece k+1 while the others still read piece k.
#include <algorithm>

#include "../errors.h"
#include "collectives.h"

namespace pycomm::core {

void broadcast(const Context& ctx, const BroadcastArgs& a) {
  ctx.session.begin("broadcast");
  const int world = ctx.session.world();
  if (a.root < 0 || a.root >= world) throw InvalidArgument("root: out of range for this group");
  const bool is_root = ctx.session.rank() == a.root;
  const Fingerprint fp = fingerprint_of(CollectiveKind::kBroadcast, a.count, a.dtype,
                                        Algorithm::kDirect, nullptr, 0, a.root);
  const size_t esize = dtype_size(a.dtype);
  const size_t piece = ctx.path.slot_bytes() / esize;
  char* data = static_cast<char*>(a.data);
  ctx.backup.begin(a.data, a.count * esize, a.restore && !is_root);
  try {
    size_t done = 0;
    do {
      const size_t n = std::min(a.count - done, piece);
      if (is_root) team_copy(ctx.team, ctx.path.next_slot(), data + done * esize, n * esize);
      ctx.session.handshake(fp);
      if (!is_root) {
        // One piece: written after the only wait, nothing to restore.
        if (n < a.count) ctx.backup.save(done * esize, n * esize);
        team_copy(ctx.team, data + done * esize, ctx.path.slot(a.root), n * esize);
      }
      done += n;
    } while (done < a.count);
  } catch (const CommTimeout&) {
    ctx.backup.restore();
    throw;
  }
}

}  // namespace pycomm::core
