#include "single_copy.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "../call_profile.h"
#include "../errors.h"
#include "../kernels/reduce_kernels.h"

namespace pycomm::core {
namespace {

// A reduction reads each peer's piece into a scratch of this size and folds
// it in while it is still in the core's cache (a few of them fit in L2 at
// once); larger pieces would spill before they are read back, smaller ones
// pay the call into the kernel more often.
constexpr size_t kPieceBytes = size_t(128) << 10;

}  // namespace

Announced* announce(const Context& ctx, size_t n) {
  if (ctx.path.slot_bytes() < n * sizeof(Announced)) {
    throw InvalidArgument("single_copy: the slots are too small to announce this world's tensors");
  }
  return static_cast<Announced*>(ctx.path.next_slot());
}

uint64_t announced_at(const Context& ctx, int peer, size_t index, size_t bytes) {
  const Announced& a = static_cast<const Announced*>(ctx.path.slot(peer))[index];
  if (a.bytes != bytes || (bytes > 0 && a.address == 0)) {
    std::ostringstream os;
    os << "rank " << ctx.session.rank() << ": " << "rank " << peer << " announced " << a.bytes
       << " bytes at 0x" << std::hex << a.address << std::dec << " where its collective holds " << bytes
       << " (a bug: the fingerprints agreed)";
    throw CommError(ctx.session.abort(os.str()));
  }
  return a.address;
}

const uint64_t* announced_by_peers(const Context& ctx, size_t bytes) {
  const int world = ctx.session.world(), rank = ctx.session.rank();
  thread_local std::vector<uint64_t> theirs;
  theirs.resize(size_t(world));
  for (int r = 0; r < world; ++r) theirs[size_t(r)] = r == rank ? 0 : announced_at(ctx, r, 0, bytes);
  return theirs.data();
}

void read(const Context& ctx, int peer, void* local, uint64_t remote, size_t bytes) {
  ctx.team.split(bytes, 1, [&](size_t first, size_t count) {
    ctx.cma.read(peer, static_cast<char*>(local) + first, remote + first, count);
  });
}

void release(const Context& ctx, const Fingerprint& fp) { ctx.session.handshake(fp); }

void gather_single_copy(const Context& ctx, const Fingerprint& fp, const char* input, size_t bytes,
                        const RankParts<char>& out, bool collect) {
  const int world = ctx.session.world(), rank = ctx.session.rank();
  *announce(ctx, 1) = Announced{reinterpret_cast<uint64_t>(input), bytes};
  ctx.session.handshake(fp);
  if (collect) {
    if (out.at(rank) != input) team_copy(ctx.team, out.at(rank), input, bytes);
    // Peers in turn from the next one on, so that they do not all read rank 0 first.
    for (int s = 1; s < world; ++s) {
      const int peer = (rank + s) % world;
      read(ctx, peer, out.at(peer), announced_at(ctx, peer, 0, bytes), bytes);
    }
  }
  release(ctx, fp);
}

void reduce_from_peers(const Context& ctx, DType dtype, ReduceOp op, int divisor, void* out, const void* mine,
                       const uint64_t* theirs, size_t first, size_t n) {
  const int world = ctx.session.world(), rank = ctx.session.rank();
  const size_t esize = dtype_size(dtype);
  const size_t piece = std::max<size_t>(1, kPieceBytes / esize);
  ctx.team.split(n, esize, [&](size_t share_first, size_t share_n) {
    thread_local std::vector<char> scratch;
    thread_local std::vector<const void*> srcs;
    scratch.resize(size_t(world) * piece * esize);
    srcs.resize(size_t(world));
    for (size_t done = 0; done < share_n; done += piece) {
      const size_t at = first + share_first + done;
      const size_t m = std::min(piece, share_n - done);
      for (int r = 0; r < world; ++r) {
        if (r == rank) {
          srcs[size_t(r)] = static_cast<const char*>(mine) + at * esize;
          continue;
        }
        char* into = scratch.data() + size_t(r) * piece * esize;
        ctx.cma.read(r, into, theirs[r] + at * esize, m * esize);
        srcs[size_t(r)] = into;
      }
      const PartTimer timer(CallPart::kReduce);
      reduce_sources(dtype, op, static_cast<char*>(out) + (at - first) * esize, srcs.data(), world, m, divisor);
    }
  });
}

}  // namespace pycomm::core
