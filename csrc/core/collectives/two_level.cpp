#include "two_level.h"

#include <algorithm>
#include <string>
#include <vector>

#include "../errors.h"
#include "../kernels/reduce_kernels.h"
#include "slot_pieces.h"

namespace pycomm::core {
namespace {

// The group's domains, each its ranks in rank order, and this rank's place.
struct Domains {
  std::vector<std::vector<int>> members;
  int domain = 0;  // this rank's
  size_t index = 0;  // this rank's among its domain's members
};

Domains domains_of(const int* domain_of, int world, int rank) {
  Domains d;
  int count = 1;
  if (domain_of) {
    for (int r = 0; r < world; ++r) count = std::max(count, domain_of[r] + 1);
  }
  d.members.resize(size_t(count));
  for (int r = 0; r < world; ++r) {
    const int of = domain_of ? domain_of[r] : 0;
    if (of < 0) throw InvalidArgument("two_level: rank " + std::to_string(r) + " has no NUMA domain");
    if (r == rank) {
      d.domain = of;
      d.index = d.members[size_t(of)].size();
    }
    d.members[size_t(of)].push_back(r);
  }
  for (size_t i = 0; i < d.members.size(); ++i) {
    if (d.members[i].empty()) {
      throw InvalidArgument("two_level: NUMA domain " + std::to_string(i) + " has no rank (domains are "
                            "numbered 0..D-1)");
    }
  }
  return d;
}

// Each member's share of a piece of n elements: member i holds [i*s, (i+1)*s).
size_t share_size(size_t n, size_t members) { return (n + members - 1) / members; }

}  // namespace

void two_level_all_reduce(const Context& ctx, const AllReduceArgs& a, const Fingerprint& fp, int divisor) {
  const int world = ctx.session.world();
  const Domains dom = domains_of(a.domain_of, world, ctx.session.rank());
  const std::vector<int>& mine = dom.members[size_t(dom.domain)];
  const size_t domains = dom.members.size();
  const size_t esize = dtype_size(a.dtype);
  const size_t piece = ctx.path.slot_bytes() / esize;
  // With more than one domain, step 2 sums (avg divides once, in step 3).
  const ReduceOp partial_op = domains > 1 && a.op == ReduceOp::kAvg ? ReduceOp::kSum : a.op;
  std::vector<const void*> srcs(std::max(mine.size(), domains));
  char* data = static_cast<char*>(a.data);
  auto slot = [&](int r) { return static_cast<const char*>(ctx.path.slot(r)); };
  for_each_slot_piece(a.count, piece, [&](size_t done, size_t n) {
    // 1. This piece into this rank's slot.
    team_copy(ctx.team, ctx.path.next_slot(), data + done * esize, n * esize);
    ctx.session.handshake(fp);

    // 2. This rank's share, over its domain.
    const size_t share = share_size(n, mine.size());
    const size_t lo = std::min(n, dom.index * share), hi = std::min(n, lo + share);
    char* out = static_cast<char*>(ctx.path.next_slot());
    for (size_t i = 0; i < mine.size(); ++i) srcs[i] = slot(mine[i]) + lo * esize;
    team_reduce_sources(ctx.team, a.dtype, partial_op, out + lo * esize, srcs.data(), int(mine.size()),
                        hi - lo, divisor);
    ctx.session.handshake(fp);

    // 3. The same share, over the domains' partials. Domains of other sizes
    // split the piece at other bounds: the share goes in runs, each of which
    // lies in one member's share of every domain.
    if (domains > 1) {
      out = static_cast<char*>(ctx.path.next_slot());
      for (size_t pos = lo; pos < hi;) {
        size_t end = hi;
        for (size_t d = 0; d < domains; ++d) {
          const std::vector<int>& members = dom.members[d];
          const size_t s = share_size(n, members.size());
          end = std::min(end, (pos / s + 1) * s);
          srcs[d] = slot(members[pos / s]) + pos * esize;
        }
        team_reduce_sources(ctx.team, a.dtype, a.op, out + pos * esize, srcs.data(), int(domains), end - pos,
                            divisor);
        pos = end;
      }
      ctx.session.handshake(fp);
    }

    // 4. Every share, from the member of this domain that holds it. A piece
    // of a larger tensor is saved first (collectives.h: restore).
    if (n < a.count) ctx.backup.save(done * esize, n * esize);
    for (size_t i = 0; i < mine.size(); ++i) {
      const size_t first = std::min(n, i * share), last = std::min(n, first + share);
      team_copy(ctx.team, data + (done + first) * esize, slot(mine[i]) + first * esize, (last - first) * esize);
    }
  });
}

}  // namespace pycomm::core
