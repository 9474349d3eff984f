// Scatter. Staging (kDirect): the root copies one piece of every rank's part
// into its slot, side by side (the slot holds world pieces); after the
// handshake each rank copies its own piece out. The slots' two parities let
// the root fill the next pieces while the others still read these, as in
// broadcast. Single copy: each rank reads its part of the root's input
// straight into its output (single_copy.h).
#include "../errors.h"
#include "collectives.h"
#include "rank_parts.h"
#include "single_copy.h"
#include "slot_pieces.h"

namespace pycomm::core {

void scatter(const Context& ctx, const ScatterArgs& a) {
  ctx.session.begin("scatter");
  const int world = ctx.session.world();
  const int rank = ctx.session.rank();
  if (a.root < 0 || a.root >= world) throw InvalidArgument("root: out of range for this group");
  check_staged_or_single_copy("scatter", a.algorithm, ctx);
  const Fingerprint fp = fingerprint_of(FingerprintKind::kScatter, a.count, a.dtype, a.algorithm, nullptr, 0,
                                        a.root);
  const size_t esize = dtype_size(a.dtype);
  char* out = static_cast<char*>(a.output);
  const RankParts<const char> in{a.inputs, a.input, a.count * esize};
  if (a.algorithm == Algorithm::kSingleCopy && world > 1) {
    // The root announces each rank's part; the others announce nothing.
    const size_t bytes = a.count * esize;
    Announced* parts = announce(ctx, size_t(world));
    for (int r = 0; r < world; ++r) {
      parts[r] = rank == a.root ? Announced{reinterpret_cast<uint64_t>(in.at(r)), bytes} : Announced{};
    }
    ctx.session.handshake(fp);
    if (rank == a.root) {
      team_copy(ctx.team, out, in.at(rank), bytes);
    } else {
      read(ctx, a.root, out, announced_at(ctx, a.root, size_t(rank), bytes), bytes);
    }
    release(ctx, fp);
    return;
  }
  const size_t piece = ctx.path.slot_bytes() / esize / size_t(world);
  if (piece == 0 && a.count > 0) throw InvalidArgument("scatter: the slots are too small for this world size");
  for_each_slot_piece(a.count, piece, [&](size_t done, size_t n) {
    if (rank == a.root) {
      char* slot = static_cast<char*>(ctx.path.next_slot());
      for (int r = 0; r < world; ++r) {
        team_copy(ctx.team, slot + size_t(r) * piece * esize, in.at(r) + done * esize, n * esize);
      }
    }
    ctx.session.handshake(fp);
    team_copy(ctx.team, out + done * esize,
              static_cast<const char*>(ctx.path.slot(a.root)) + size_t(rank) * piece * esize, n * esize);
  });
}

}  // namespace pycomm::core
