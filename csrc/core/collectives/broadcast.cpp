// Broadcast. Staging (kDirect): the root copies each piece into its slot;
// after the handshake every other rank copies it out. The slots' two parities
// let the root fill piece k+1 while the others still read piece k.
// Single copy: every other rank reads the root's tensor straight into its own
// (single_copy.h); the root waits at the closing handshake until all have.
#include "../errors.h"
#include "collectives.h"
#include "single_copy.h"
#include "slot_pieces.h"

namespace pycomm::core {
namespace {

void single_copy(const Context& ctx, const BroadcastArgs& a, const Fingerprint& fp, bool is_root) {
  const size_t bytes = a.count * dtype_size(a.dtype);
  *announce(ctx, 1) = Announced{reinterpret_cast<uint64_t>(a.data), bytes};
  ctx.session.handshake(fp);
  if (!is_root) {
    ctx.backup.save(0, bytes);
    read(ctx, a.root, a.data, announced_at(ctx, a.root, 0, bytes), bytes);
  }
  release(ctx, fp);
}

void staged(const Context& ctx, const BroadcastArgs& a, const Fingerprint& fp, bool is_root) {
  const size_t esize = dtype_size(a.dtype);
  char* data = static_cast<char*>(a.data);
  for_each_slot_piece(a.count, ctx.path.slot_bytes() / esize, [&](size_t done, size_t n) {
    if (is_root) team_copy(ctx.team, ctx.path.next_slot(), data + done * esize, n * esize);
    ctx.session.handshake(fp);
    if (!is_root) {
      // One piece: written after the only wait, nothing to restore.
      if (n < a.count) ctx.backup.save(done * esize, n * esize);
      team_copy(ctx.team, data + done * esize, ctx.path.slot(a.root), n * esize);
    }
  });
}

}  // namespace

void broadcast(const Context& ctx, const BroadcastArgs& a) {
  ctx.session.begin("broadcast");
  const int world = ctx.session.world();
  if (a.root < 0 || a.root >= world) throw InvalidArgument("root: out of range for this group");
  check_staged_or_single_copy("broadcast", a.algorithm, ctx);
  const bool is_root = ctx.session.rank() == a.root;
  const Fingerprint fp = fingerprint_of(FingerprintKind::kBroadcast, a.count, a.dtype, a.algorithm, nullptr, 0,
                                        a.root);
  restoring_on_failure(ctx.backup, a.data, a.count * dtype_size(a.dtype), a.restore && !is_root, [&] {
    if (a.algorithm == Algorithm::kSingleCopy && world > 1) {
      single_copy(ctx, a, fp, is_root);
    } else {
      staged(ctx, a, fp, is_root);
    }
  });
}

}  // namespace pycomm::core
