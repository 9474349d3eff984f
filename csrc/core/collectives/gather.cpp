// Gather: every rank copies a piece of its input into its own slot; after the
// handshake the root copies every rank's piece out. As in broadcast (whose
// roles are the other way round), the slots' two parities let the ranks fill
// piece k+1 while the root still reads piece k; the next handshake is where
// the root is done with it.
#include <algorithm>

#include "../errors.h"
#include "collectives.h"

namespace pycomm::core {

void gather(const Context& ctx, const GatherArgs& a) {
  ctx.session.begin("gather");
  const int world = ctx.session.world();
  if (a.root < 0 || a.root >= world) throw InvalidArgument("root: out of range for this group");
  const bool is_root = ctx.session.rank() == a.root;
  const Fingerprint fp = fingerprint_of(CollectiveKind::kGather, a.count, a.dtype,
                                        Algorithm::kDirect, nullptr, 0, a.root);
  const size_t esize = dtype_size(a.dtype);
  const size_t piece = ctx.path.slot_bytes() / esize;
  const char* in = static_cast<const char*>(a.input);
  char* out = static_cast<char*>(a.output);
  size_t done = 0;
  do {
    const size_t n = std::min(a.count - done, piece);
    team_copy(ctx.team, ctx.path.next_slot(), in + done * esize, n * esize);
    ctx.session.handshake(fp);
    if (is_root) {
      for (int r = 0; r < world; ++r) {
        team_copy(ctx.team, out + (size_t(r) * a.count + done) * esize, ctx.path.slot(r), n * esize);
      }
    }
    done += n;
  } while (done < a.count);
}

}  // namespace pycomm::core
