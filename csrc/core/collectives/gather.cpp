// Gather. Staging (kDirect): every rank copies a piece of its input into its
// own slot; after the handshake the root copies every rank's piece out. As in
// broadcast (whose roles are the other way round), the slots' two parities let
// the ranks fill piece k+1 while the root still reads piece k; the next
// handshake is where the root is done with it. Single copy: the root reads
// every peer's input straight into its output (single_copy.h).
#include <algorithm>

#include "../errors.h"
#include "collectives.h"
#include "single_copy.h"

namespace pycomm::core {
namespace {

// Where rank r's part goes on the root.
char* part_out(const GatherArgs& a, int r, size_t esize) {
  return a.outputs ? static_cast<char*>(a.outputs[r]) : static_cast<char*>(a.output) + size_t(r) * a.count * esize;
}

}  // namespace

void gather(const Context& ctx, const GatherArgs& a) {
  ctx.session.begin("gather");
  const int world = ctx.session.world();
  const int rank = ctx.session.rank();
  if (a.root < 0 || a.root >= world) throw InvalidArgument("root: out of range for this group");
  check_staged_or_single_copy("gather", a.algorithm, ctx);
  const bool is_root = rank == a.root;
  const Fingerprint fp = fingerprint_of(CollectiveKind::kGather, a.count, a.dtype, a.algorithm, nullptr, 0, a.root);
  const size_t esize = dtype_size(a.dtype);
  const char* in = static_cast<const char*>(a.input);
  if (a.algorithm == Algorithm::kSingleCopy && world > 1) {
    const size_t bytes = a.count * esize;
    *announce(ctx, 1) = Announced{reinterpret_cast<uint64_t>(in), bytes};
    ctx.session.handshake(fp);
    if (is_root) {
      team_copy(ctx.team, part_out(a, rank, esize), in, bytes);
      for (int s = 1; s < world; ++s) {
        const int peer = (rank + s) % world;
        read(ctx, peer, part_out(a, peer, esize), announced_at(ctx, peer, 0, bytes), bytes);
      }
    }
    release(ctx, fp);
    return;
  }
  const size_t piece = ctx.path.slot_bytes() / esize;
  size_t done = 0;
  do {
    const size_t n = std::min(a.count - done, piece);
    team_copy(ctx.team, ctx.path.next_slot(), in + done * esize, n * esize);
    ctx.session.handshake(fp);
    if (is_root) {
      for (int r = 0; r < world; ++r) {
        team_copy(ctx.team, part_out(a, r, esize) + done * esize, ctx.path.slot(r), n * esize);
      }
    }
    done += n;
  } while (done < a.count);
}

}  // namespace pycomm::core
