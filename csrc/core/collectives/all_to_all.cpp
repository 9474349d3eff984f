// All-to-all: every rank sends a block of its own size to every peer. The
// sizes are checked first: each rank posts what it sends to and expects from
// every peer in its slot, and after the handshake every rank checks the whole
// matrix, so a disagreement raises the same CollectiveMismatch everywhere
// before any byte moves. Then w-1 pairwise steps over the links: at step s,
// rank r sends to r+s while it receives from r-s, a message of each in turn.
//
// Where the ranks read each other's memory, a sender posts beside each
// block's size where the block lies when it is at least single_copy_min_bytes,
// and its receiver reads it straight out of the sender's tensor instead of
// through the link (single_copy.h); a closing handshake then keeps every
// sender in the collective until its blocks are read. The sender alone
// decides, and says so, so the two ends of a block never disagree.
//
// Why this cannot deadlock: at step s a rank waits only on its two partners of
// step s; a partner that has moved past step s has finished with it, and one
// still at an earlier step waits only on ranks of that step. The lowest step
// always makes progress, because the links hold two or more messages. A read
// waits on nobody.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "../errors.h"
#include "collectives.h"
#include "single_copy.h"

namespace pycomm::core {
namespace {

// What each rank posts in its slot: per peer p, the elements it sends to p
// (post[p]), the elements it expects from p (post[world + p]), and where the
// block for p lies when p is to read it (post[2 world + p]; 0: by the link).
constexpr size_t kPostsPerPeer = 3;

void check_sizes(const Context& ctx) {
  const int world = ctx.session.world();
  for (int from = 0; from < world; ++from) {
    const uint64_t* posted = static_cast<const uint64_t*>(ctx.path.slot(from));
    for (int to = 0; to < world; ++to) {
      const uint64_t sends = posted[to];
      const uint64_t expects = static_cast<const uint64_t*>(ctx.path.slot(to))[world + from];
      if (sends != expects) {
        std::ostringstream os;
        os << "all_to_all #" << ctx.session.entered()
           << " does not match across ranks (split sizes differ): rank " << from << " sends "
           << sends << " elements to rank " << to << ", which expects " << expects
           << " from it (input_split_sizes and output_split_sizes must pair up)";
        ctx.session.fail_mismatch(os.str());
      }
    }
  }
}

}  // namespace

void all_to_all(const Context& ctx, const AllToAllArgs& a) {
  ctx.session.begin("all_to_all");
  const int world = ctx.session.world();
  const int rank = ctx.session.rank();
  if (ctx.path.slot_bytes() < kPostsPerPeer * size_t(world) * sizeof(uint64_t)) {
    throw InvalidArgument("all_to_all: the slots are too small for this world size");
  }
  // The sizes are checked after the handshake (check_sizes), not fingerprinted:
  // each rank knows only its own row and column of the matrix.
  const Fingerprint fp = fingerprint_of(FingerprintKind::kAllToAll, 0, a.dtype, Algorithm::kPairwise);
  const size_t esize = dtype_size(a.dtype);
  const bool reads = ctx.cma.enabled();
  uint64_t* post = static_cast<uint64_t*>(ctx.path.next_slot());
  for (int p = 0; p < world; ++p) {
    post[p] = a.send_counts[p];
    post[world + p] = a.recv_counts[p];
    const size_t bytes = a.send_counts[p] * esize;
    const bool straight = reads && p != rank && bytes > 0 && bytes >= ctx.tuning.single_copy_min_bytes;
    post[2 * world + p] = straight ? reinterpret_cast<uint64_t>(a.send[p]) : 0;
  }
  ctx.session.handshake(fp);
  check_sizes(ctx);
  // Where `from` put the block for `to` (0: it comes by the link).
  auto straight_at = [&](int from, int to) {
    return static_cast<const uint64_t*>(ctx.path.slot(from))[2 * world + to];
  };
  bool any_straight = false;
  for (int from = 0; from < world && !any_straight; ++from) {
    for (int to = 0; to < world; ++to) any_straight = any_straight || straight_at(from, to) != 0;
  }

  // This rank's own block, a local copy (on the team; the two overlap only in place).
  const size_t own = a.send_counts[rank] * esize;
  const char* own_from = static_cast<const char*>(a.send[rank]);
  char* own_to = static_cast<char*>(a.recv[rank]);
  if (own_to + own <= own_from || own_from + own <= own_to) {
    team_copy(ctx.team, own_to, own_from, own);
  } else {
    std::memmove(own_to, own_from, own);
  }
  for (int s = 1; s < world; ++s) {
    const int to = (rank + s) % world;
    const int from = (rank - s + world) % world;
    const char* src = static_cast<const char*>(a.send[to]);
    char* dst = static_cast<char*>(a.recv[from]);
    const size_t send_bytes = straight_at(rank, to) ? 0 : a.send_counts[to] * esize;
    const size_t recv_bytes = a.recv_counts[from] * esize;
    if (const uint64_t at = straight_at(from, rank)) {
      read(ctx, from, dst, at, recv_bytes);
    }
    const size_t link_recv_bytes = straight_at(from, rank) ? 0 : recv_bytes;
    // Each stream goes in pieces of its own link's buffer size (full for the
    // ring's link at s = 1, smaller for the others). `to` cuts what it gets
    // from us by its link_bytes_from(rank), which equals our link_bytes_to(to):
    // both sizes depend on the distance s alone, so the ends agree on the
    // number of messages, which is all the lag argument below counts.
    const size_t send_piece = ctx.path.link_bytes_to(to);
    const size_t recv_piece = ctx.path.link_bytes_from(from);
    const size_t nsend = (send_bytes + send_piece - 1) / send_piece;
    const size_t nrecv = (link_recv_bytes + recv_piece - 1) / recv_piece;
    // Receive `lag` messages behind sending, so the link's buffers all fill:
    // both ends copy at once instead of taking turns. lag < link_buffers keeps
    // it deadlock-free: the ack a send waits for comes from a receive that its
    // peer makes before its own next wait.
    const size_t lag = ctx.path.link_buffers() - 1;
    for (size_t m = 0; m < std::max(nsend, nrecv + lag); ++m) {
      if (m < nsend) {
        const size_t len = std::min(send_piece, send_bytes - m * send_piece);
        team_copy(ctx.team, ctx.path.send_buffer(to), src + m * send_piece, len);
        ctx.path.send_commit(to);
      }
      if (m >= lag && m - lag < nrecv) {
        const size_t r = m - lag;
        const size_t len = std::min(recv_piece, link_recv_bytes - r * recv_piece);
        team_copy(ctx.team, dst + r * recv_piece, ctx.path.recv_buffer(from), len);
        ctx.path.recv_commit(from);
      }
    }
  }
  if (any_straight) release(ctx, fp);
}

}  // namespace pycomm::core
