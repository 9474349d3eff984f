// Scatter: the root copies one piece of every rank's part into its slot, side
// by side (the slot holds world pieces); after the handshake each rank copies
// its own piece out. The slots' two parities let the root fill the next
// pieces while the others still read these, as in broadcast.
#include <algorithm>

#include "../errors.h"
#include "collectives.h"

namespace pycomm::core {

void scatter(const Context& ctx, const ScatterArgs& a) {
  ctx.session.begin("scatter");
  const int world = ctx.session.world();
  const int rank = ctx.session.rank();
  if (a.root < 0 || a.root >= world) throw InvalidArgument("root: out of range for this group");
  const Fingerprint fp = fingerprint_of(CollectiveKind::kScatter, a.count, a.dtype,
                                        Algorithm::kDirect, nullptr, 0, a.root);
  const size_t esize = dtype_size(a.dtype);
  const size_t piece = ctx.path.slot_bytes() / esize / size_t(world);
  if (piece == 0 && a.count > 0) throw InvalidArgument("scatter: the slots are too small for this world size");
  const char* in = static_cast<const char*>(a.input);
  char* out = static_cast<char*>(a.output);
  size_t done = 0;
  do {
    const size_t n = std::min(a.count - done, piece);
    if (rank == a.root) {
      char* slot = static_cast<char*>(ctx.path.next_slot());
      for (int r = 0; r < world; ++r) {
        team_copy(ctx.team, slot + size_t(r) * piece * esize, in + (size_t(r) * a.count + done) * esize,
                  n * esize);
      }
    }
    ctx.session.handshake(fp);
    team_copy(ctx.team, out + done * esize,
              static_cast<const char*>(ctx.path.slot(a.root)) + size_t(rank) * piece * esize, n * esize);
    done += n;
  } while (done < a.count);
}

}  // namespace pycomm::core
