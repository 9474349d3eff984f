#include "staged.h"

#include "../kernels/reduce_kernels.h"
#include "slot_pieces.h"

namespace pycomm::core {

namespace {

// Every rank posts each piece of its `count` elements at `input` in its slot;
// after the handshake a collector takes them: take(first, n).
template <class Take>
void post_pieces(const Context& ctx, const Fingerprint& fp, size_t esize, const char* input, size_t count,
                 bool collect, Take&& take) {
  for_each_slot_piece(count, ctx.path.slot_bytes() / esize, [&](size_t done, size_t n) {
    team_copy(ctx.team, ctx.path.next_slot(), input + done * esize, n * esize);
    ctx.session.handshake(fp);
    if (collect) take(done, n);
  });
}

}  // namespace

void gather_staged(const Context& ctx, const Fingerprint& fp, DType dtype, const char* input, size_t count,
                   const RankParts<char>& out, bool collect) {
  const int world = ctx.session.world();
  const size_t esize = dtype_size(dtype);
  post_pieces(ctx, fp, esize, input, count, collect, [&](size_t done, size_t n) {
    for (int r = 0; r < world; ++r) team_copy(ctx.team, out.at(r) + done * esize, ctx.path.slot(r), n * esize);
  });
}

void reduce_staged(const Context& ctx, const Fingerprint& fp, DType dtype, ReduceOp op, int divisor, char* data,
                   size_t count, bool collect) {
  const size_t esize = dtype_size(dtype);
  post_pieces(ctx, fp, esize, data, count, collect, [&](size_t done, size_t n) {
    if (n < count) ctx.backup.save(done * esize, n * esize);
    team_reduce_sources(ctx.team, dtype, op, data + done * esize, ctx.path.slots(), ctx.session.world(), n,
                        divisor);
  });
}

}  // namespace pycomm::core
