// All-to-all: every rank sends a block of its own size to every peer. The
// sizes are checked first: each rank posts what it sends to and expects from
// every peer in its slot, and after the handshake every rank checks the whole
// matrix, so a disagreement raises the same CollectiveMismatch everywhere
// before any byte moves. Then w-1 pairwise steps over the links: at step s,
// rank r sends to r+s while it receives from r-s, a message of each in turn.
//
// Why this cannot deadlock: at step s a rank waits only on its two partners of
// step s; a partner that has moved past step s has finished with it, and one
// still at an earlier step waits only on ranks of that step. The lowest step
// always makes progress, because the links hold two or more messages.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "../errors.h"
#include "collectives.h"

namespace pycomm::core {
namespace {

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
  if (ctx.path.slot_bytes() < 2 * size_t(world) * sizeof(uint64_t)) {
    throw InvalidArgument("all_to_all: the slots are too small for this world size");
  }
  // The sizes are checked after the handshake (check_sizes), not fingerprinted:
  // each rank knows only its own row and column of the matrix.
  const Fingerprint fp = fingerprint_of(CollectiveKind::kAllToAll, 0, a.dtype, Algorithm::kPairwise);
  uint64_t* post = static_cast<uint64_t*>(ctx.path.next_slot());
  for (int p = 0; p < world; ++p) {
    post[p] = a.send_counts[p];
    post[world + p] = a.recv_counts[p];
  }
  ctx.session.handshake(fp);
  check_sizes(ctx);

  const size_t esize = dtype_size(a.dtype);
  std::memmove(a.recv[rank], a.send[rank], a.send_counts[rank] * esize);
  for (int s = 1; s < world; ++s) {
    const int to = (rank + s) % world;
    const int from = (rank - s + world) % world;
    const char* src = static_cast<const char*>(a.send[to]);
    char* dst = static_cast<char*>(a.recv[from]);
    const size_t send_bytes = a.send_counts[to] * esize;
    const size_t recv_bytes = a.recv_counts[from] * esize;
    // Each stream goes in pieces of its own link's buffer size (full for the
    // ring's link at s = 1, smaller for the others). `to` cuts what it gets
    // from us by its link_bytes_from(rank), which equals our link_bytes_to(to):
    // both sizes depend on the distance s alone, so the ends agree on the
    // number of messages, which is all the lag argument below counts.
    const size_t send_piece = ctx.path.link_bytes_to(to);
    const size_t recv_piece = ctx.path.link_bytes_from(from);
    const size_t nsend = (send_bytes + send_piece - 1) / send_piece;
    const size_t nrecv = (recv_bytes + recv_piece - 1) / recv_piece;
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
        const size_t len = std::min(recv_piece, recv_bytes - r * recv_piece);
        team_copy(ctx.team, dst + r * recv_piece, ctx.path.recv_buffer(from), len);
        ctx.path.recv_commit(from);
      }
    }
  }
}

}  // namespace pycomm::core
