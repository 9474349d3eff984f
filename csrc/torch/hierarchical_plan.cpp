#include "hierarchical_plan.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>

#include "../core/errors.h"
#include "dtype_map.h"
#include "staged_tensor.h"

namespace pycomm {
namespace {

// The op the ranks of a host reduce with: avg and premul_sum sum there (the
// factor was applied before; the division comes once, after the inter-host step).
core::ReduceOp host_op(core::ReduceOp op) { return op == core::ReduceOp::kAvg ? core::ReduceOp::kSum : op; }

// gloo's op for the core's `op` on `t`'s dtype: avg sums (the division comes
// once, after), and bool's sum and product as the kernels run them
// (core::kernel_op: or and and; gloo would add the bytes).
c10d::ReduceOp c10d_op(const at::Tensor& t, core::ReduceOp requested) {
  return c10d_op_of(core::kernel_op(dtype_of(t), host_op(requested)));
}

// gloo, between hosts, reduces float32, float64, float16, bfloat16, int8,
// uint8, int32, int64 and bool, and takes no other dtype. The plans' other
// dtypes cross in one it takes, with the same result:
// - moved (broadcast, all_gather, all_to_all): any dtype, as its bytes;
// - reduced: int16 and uint16 widened to int32, uint32 to int64 (narrowing
//   back wraps as the narrow type's sums, products and bitwise ops do, and max
//   and min are exact); uint64 as the int64 of its bits (two's complement:
//   the same sums, products and bitwise results), its bits flipped at the
//   sign for max and min (x ^ 2^63 turns unsigned order into signed order).
at::Tensor as_bytes(const at::Tensor& t) {
  // (An empty tensor may keep a step, which view(dtype) refuses.)
  return t.numel() == 0 ? at::empty({0}, t.options().dtype(at::kByte)) : t.view(at::kByte);
}

bool gloo_reduces(core::DType d) {
  return d != core::DType::kInt16 && d != core::DType::kUInt16 && d != core::DType::kUInt32 &&
         d != core::DType::kUInt64;
}

bool flips_sign(core::DType d, core::ReduceOp op) {
  return d == core::DType::kUInt64 && (op == core::ReduceOp::kMax || op == core::ReduceOp::kMin);
}

// The tensor gloo reduces in place of `t` (`t` itself when gloo takes its dtype).
at::Tensor for_gloo(const at::Tensor& t, core::ReduceOp op) {
  const core::DType d = dtype_of(t);
  if (gloo_reduces(d)) return t;
  if (d == core::DType::kUInt64) {
    const at::Tensor bits = t.view(at::kLong);
    return flips_sign(d, op) ? bits.bitwise_xor(std::numeric_limits<int64_t>::min()) : bits.clone();
  }
  return t.to(d == core::DType::kUInt32 ? at::kLong : at::kInt);
}

// Writes what gloo reduced (`g`, from for_gloo) into `out`.
void from_gloo(const at::Tensor& out, const at::Tensor& g, core::ReduceOp op) {
  const core::DType d = dtype_of(out);
  if (gloo_reduces(d)) {
    if (!g.is_same(out)) copy_bits(out, g);
    return;
  }
  if (d == core::DType::kUInt64) {
    out.view(at::kLong).copy_(flips_sign(d, op) ? g.bitwise_xor(std::numeric_limits<int64_t>::min()) : g);
    return;
  }
  // Wraps: the value modulo 2^16 (2^32), as the narrow type's arithmetic.
  out.copy_(g.to(d == core::DType::kUInt32 ? at::kUInt32 : d == core::DType::kUInt16 ? at::kUInt16 : at::kShort));
}

// An operation of another backend (between hosts, or the group-wide one)
// failed. This host's session is aborted first: the local peers waiting for
// this rank fail at once, not at their deadline. A timeout stays a
// CommTimeout; anything else is a CommError.
[[noreturn]] void fail_remote(const core::Context& ctx, const char* what, const std::string& reason) {
  const std::string msg = std::string("pycomm: the inter-host step of ") + what + " failed on rank " +
                          std::to_string(ctx.session.rank()) + " of its host: " + reason;
  ctx.session.abort(msg);
  if (reason.find("imed out") != std::string::npos || reason.find("imeout") != std::string::npos) {
    throw core::CommTimeout(msg);
  }
  throw core::CommError(msg);
}

// Issues one operation of another backend without waiting for it (failures:
// fail_remote).
c10::intrusive_ptr<c10d::Work> issue_remote(
    const core::Context& ctx, const char* what,
    const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  try {
    return issue();
  } catch (const c10::Error& e) {
    fail_remote(ctx, what, e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail_remote(ctx, what, e.what());
  }
}

void wait_remote(const core::Context& ctx, const char* what, const c10::intrusive_ptr<c10d::Work>& w) {
  try {
    w->wait();
  } catch (const c10::Error& e) {
    fail_remote(ctx, what, e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail_remote(ctx, what, e.what());
  }
}

// Issues and waits.
void remote(const core::Context& ctx, const char* what,
            const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  wait_remote(ctx, what, issue_remote(ctx, what, issue));
}

// `out` ends as `backend`'s reduce-scatter of `in` (world x `out`), in a dtype
// gloo takes (for_gloo); avg sums (the division comes once, after).
void gloo_reduce_scatter(const core::Context& ctx, c10d::Backend& backend, const at::Tensor& out,
                         const at::Tensor& in, core::ReduceOp op) {
  at::Tensor o = for_gloo(out, op), i = for_gloo(in, op);
  remote(ctx, "reduce_scatter", [&] {
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = c10d_op(out, op);
    return backend._reduce_scatter_base(o, i, opts);
  });
  from_gloo(out, o, op);
}

// The blocks as one 1-D tensor: all_to_all_single's own, or the list
// form's packed into one.
at::Tensor joined(const Blocks& b) {
  if (b.tensors.size() == 1) return b.tensors[0].reshape({-1});
  std::vector<at::Tensor> flats;
  for (const auto& t : b.tensors) flats.push_back(t.reshape({-1}));
  return at::cat(flats);
}

}  // namespace

HostLayout::HostLayout(int r, std::vector<std::vector<int>> h) : rank(r), hosts(std::move(h)) {
  int world = 0;
  for (const auto& ranks : hosts) world += int(ranks.size());
  host_of.assign(size_t(world), -1);
  local_of.assign(size_t(world), -1);
  for (size_t i = 0; i < hosts.size(); ++i) {
    TORCH_CHECK_VALUE(!hosts[i].empty(), "hosts: host ", i, " has no ranks");
    uniform = uniform && hosts[i].size() == hosts[0].size();
    for (size_t l = 0; l < hosts[i].size(); ++l) {
      const int g = hosts[i][l];
      TORCH_CHECK_VALUE(g >= 0 && g < world && host_of[size_t(g)] < 0, "hosts: rank ", g,
                        " is out of range or on two hosts");
      host_of[size_t(g)] = int(i);
      local_of[size_t(g)] = int(l);
    }
  }
  TORCH_CHECK_VALUE(rank >= 0 && rank < world, "rank: ", rank, " is not in the layout");
  host = host_of[size_t(rank)];
  local_rank = local_of[size_t(rank)];
}

HierarchicalPlan::HierarchicalPlan(HostLayout layout, c10::intrusive_ptr<c10d::Backend> inter,
                                   c10::intrusive_ptr<c10d::Backend> group,
                                   const core::CommConfig& config)
    : layout_(std::move(layout)),
      inter_(std::move(inter)),
      group_(std::move(group)),
      tuning_(config.hierarchy),
      direct_max_bytes_(config.tuning.direct_max_bytes) {
  tuning_.piece_bytes = std::max<size_t>(tuning_.piece_bytes, 1);
  route_query_.hosts = int(layout_.hosts.size());
  route_query_.uniform = layout_.uniform;
  route_query_.local_size = layout_.local_size();
  route_query_.leader_max_bytes = tuning_.leader_max_bytes;
}

core::Algorithm HierarchicalPlan::host_step(size_t bytes_per_rank) const {
  return core::host_algorithm(bytes_per_rank, layout_.local_size(), direct_max_bytes_);
}

void HierarchicalPlan::inter_all_reduce(const core::Context& ctx, const at::Tensor& t,
                                        core::ReduceOp op) const {
  if (inter_->getSize() > 1 && t.numel() > 0) {
    const at::Tensor g = for_gloo(t, op);
    remote(ctx, "all_reduce", [&] {
      std::vector<at::Tensor> ts{g};
      c10d::AllreduceOptions o;
      o.reduceOp = c10d_op(t, op);
      return inter_->allreduce(ts, o);
    });
    from_gloo(t, g, op);
  }
  if (op == core::ReduceOp::kAvg) t.div_(layout_.world());
}

void HierarchicalPlan::leader_all_reduce(const core::Context& ctx, const at::Tensor& t,
                                         core::ReduceOp op) const {
  core::ReduceArgs r;
  r.dtype = dtype_of(t);
  r.data = t.data_ptr();
  r.count = size_t(t.numel());
  r.op = host_op(op);
  r.root = 0;
  r.restore = false;
  core::reduce(ctx, r);
  // The leaders' inter group holds every host's leader; the result is gloo's,
  // the same bytes on each, and each host then copies it out unchanged.
  if (layout_.local_rank == 0) inter_all_reduce(ctx, t, op);
  core::BroadcastArgs b;
  b.dtype = r.dtype;
  b.data = t.data_ptr();
  b.count = r.count;
  b.root = 0;
  b.restore = false;
  core::broadcast(ctx, b);
}

void HierarchicalPlan::rs_ar_ag(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op) const {
  // In pieces, pipelined: while gloo reduces piece k between hosts (on its
  // own threads), this rank reduce-scatters piece k+1 and all-gathers piece
  // k-1 in shared memory. Piece boundaries fall on multiples of L elements,
  // the same on every rank.
  const core::DType dtype = dtype_of(t);
  const int64_t L = layout_.local_size();
  const int64_t units = t.numel() / L;
  const int64_t esize = int64_t(core::dtype_size(dtype));
  const int64_t per_piece = std::max<int64_t>(1, int64_t(tuning_.piece_bytes) / (esize * L));
  const int64_t pieces = (units + per_piece - 1) / per_piece;
  at::Tensor part = at::empty({units}, t.options());
  char* base = static_cast<char*>(t.data_ptr());
  std::vector<c10::intrusive_ptr<c10d::Work>> works(static_cast<size_t>(pieces));
  std::vector<at::Tensor> crossing(static_cast<size_t>(pieces));  // what gloo reduces (for_gloo)
  auto gather = [&](int64_t k) {
    const int64_t u0 = k * per_piece, m = std::min(per_piece, units - u0);
    at::Tensor shard = part.narrow(0, u0, m);
    if (works[size_t(k)]) {
      wait_remote(ctx, "all_reduce", works[size_t(k)]);
      from_gloo(shard, crossing[size_t(k)], op);
    }
    works[size_t(k)].reset();
    crossing[size_t(k)].reset();
    if (op == core::ReduceOp::kAvg) shard.div_(layout_.world());
    core::AllGatherArgs ag;
    ag.dtype = dtype;
    ag.input = shard.data_ptr();
    ag.output = base + u0 * L * esize;
    ag.count = size_t(m);
    ag.algorithm = host_step(size_t(m * esize));
    core::all_gather(ctx, ag);
  };
  for (int64_t k = 0; k < pieces; ++k) {
    const int64_t u0 = k * per_piece, m = std::min(per_piece, units - u0);
    at::Tensor shard = part.narrow(0, u0, m);
    core::ReduceScatterArgs rs;
    rs.dtype = dtype;
    rs.input = base + u0 * L * esize;
    rs.output = shard.data_ptr();
    rs.count = size_t(m);
    rs.op = host_op(op);
    rs.algorithm = host_step(size_t(m * L * esize));
    core::reduce_scatter(ctx, rs);
    if (inter_->getSize() > 1) {
      crossing[size_t(k)] = for_gloo(shard, op);
      works[size_t(k)] = issue_remote(ctx, "all_reduce", [&] {
        std::vector<at::Tensor> ts{crossing[size_t(k)]};
        c10d::AllreduceOptions o;
        o.reduceOp = c10d_op(shard, op);
        return inter_->allreduce(ts, o);
      });
    }
    if (k > 0) gather(k - 1);
  }
  gather(pieces - 1);
}

void HierarchicalPlan::all_reduce(const core::Context& ctx, const at::Tensor& t,
                                  const AllReduceStep& step) const {
  const core::ReduceOp op = step.op;
  const int64_t n = t.numel();
  // The part that splits into L equal shards goes reduce-scatter / all-reduce /
  // all-gather; the few elements left over go through the leaders.
  const int64_t L = layout_.local_size();
  const int64_t main = step.algorithm == core::Algorithm::kRsArAg ? n / L * L : 0;
  if (main > 0) rs_ar_ag(ctx, t.narrow(0, 0, main), op);
  if (main < n || n == 0) leader_all_reduce(ctx, t.narrow(0, main, n - main), op);
}

void HierarchicalPlan::reduce(const core::Context& ctx, const at::Tensor& t, core::ReduceOp op,
                              int root, core::Algorithm algorithm) const {
  // An all-reduce on a copy: the other ranks' tensors are not to be written.
  at::Tensor work = clone_bits(t);
  AllReduceStep step;
  step.op = op;
  step.algorithm = algorithm;
  all_reduce(ctx, work, step);
  if (root == layout_.rank) copy_bits(t, work);
}

void HierarchicalPlan::broadcast(const core::Context& ctx, const at::Tensor& t, int root,
                                 core::Algorithm) const {
  const int root_host = layout_.host_of[size_t(root)];
  core::BroadcastArgs b;
  b.dtype = dtype_of(t);
  b.data = t.data_ptr();
  b.count = size_t(t.numel());
  b.restore = false;
  // The root's host first, then its leader to the other leaders, then
  // each other host from its leader.
  if (layout_.host == root_host) {
    b.root = layout_.local_of[size_t(root)];
    core::broadcast(ctx, b);
  }
  if (layout_.local_rank == 0 && inter_->getSize() > 1 && t.numel() > 0) {
    remote(ctx, "broadcast", [&] {
      std::vector<at::Tensor> ts{as_bytes(t)};
      c10d::BroadcastOptions o;
      o.rootRank = root_host;
      return inter_->broadcast(ts, o);
    });
  }
  if (layout_.host != root_host) {
    b.root = 0;
    core::broadcast(ctx, b);
  }
}

void HierarchicalPlan::all_gather(const core::Context& ctx, const at::Tensor& in, const at::Tensor& out,
                                  core::Algorithm algorithm) const {
  if (algorithm == core::Algorithm::kGloo) {
    remote(ctx, "all_gather", [&] {
      at::Tensor o = as_bytes(out), i = as_bytes(in);
      return group_->_allgather_base(o, i, c10d::AllgatherOptions());
    });
    return;
  }
  const int64_t c = in.numel();
  if (c == 0) return;  // the same on every rank: nothing to move
  const int H = int(layout_.hosts.size()), L = layout_.local_size();
  // Between hosts first: every rank gets the inputs of its counterparts on
  // every host ([host]), then the host gathers those ([local][host]).
  at::Tensor across = at::empty({int64_t(H) * c}, in.options());
  remote(ctx, "all_gather", [&] {
    at::Tensor o = as_bytes(across), i = as_bytes(in);
    return inter_->_allgather_base(o, i, c10d::AllgatherOptions());
  });
  at::Tensor all = at::empty({int64_t(L) * H * c}, in.options());
  core::AllGatherArgs ag;
  ag.dtype = dtype_of(in);
  ag.input = across.data_ptr();
  ag.output = all.data_ptr();
  ag.count = size_t(int64_t(H) * c);
  ag.algorithm = host_step(ag.count * size_t(in.element_size()));
  core::all_gather(ctx, ag);
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h) {
      const int g = layout_.hosts[size_t(h)][size_t(l)];
      copy_bits(out.narrow(0, int64_t(g) * c, c), all.narrow(0, (int64_t(l) * H + h) * c, c));
    }
  }
}

void HierarchicalPlan::reduce_scatter(const core::Context& ctx, const at::Tensor& in,
                                      const at::Tensor& out, core::ReduceOp op,
                                      core::Algorithm algorithm) const {
  const int64_t c = out.numel();
  if (c == 0) return;  // the same on every rank: nothing to move
  if (algorithm == core::Algorithm::kGloo) {
    gloo_reduce_scatter(ctx, *group_, out, in, op);
    if (op == core::ReduceOp::kAvg) out.div_(layout_.world());
    return;
  }
  const int H = int(layout_.hosts.size()), L = layout_.local_size();
  // Chunks in [local][host] order, so the host's reduce-scatter leaves local
  // rank l the chunks of every host's l-th rank; those are then reduced
  // between hosts, each rank keeping its own.
  at::Tensor perm = at::empty({int64_t(L) * H * c}, in.options());
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h) {
      const int g = layout_.hosts[size_t(h)][size_t(l)];
      copy_bits(perm.narrow(0, (int64_t(l) * H + h) * c, c), in.narrow(0, int64_t(g) * c, c));
    }
  }
  at::Tensor part = at::empty({int64_t(H) * c}, in.options());
  core::ReduceScatterArgs rs;
  rs.dtype = dtype_of(out);
  rs.input = perm.data_ptr();
  rs.output = part.data_ptr();
  rs.count = size_t(int64_t(H) * c);
  rs.op = host_op(op);
  rs.algorithm = host_step(rs.count * size_t(L) * size_t(out.element_size()));
  core::reduce_scatter(ctx, rs);
  if (inter_->getSize() > 1) {
    gloo_reduce_scatter(ctx, *inter_, out, part, op);
  } else {
    copy_bits(out, part);
  }
  if (op == core::ReduceOp::kAvg) out.div_(layout_.world());
}

void HierarchicalPlan::all_to_all(const core::Context& ctx, const Blocks& send,
                                  const Blocks& recv) const {
  // Between hosts the exchange is the group-wide backend's, as one
  // all_to_all_single with split sizes in elements.
  at::Tensor in = joined(send);
  const int64_t total = std::accumulate(recv.counts.begin(), recv.counts.end(), int64_t(0));
  at::Tensor out = recv.tensors.size() == 1 ? recv.tensors[0].reshape({-1})
                                            : at::empty({total}, in.options());
  const int64_t esize = int64_t(in.element_size());
  remote(ctx, "all_to_all", [&] {
    // As bytes (any dtype), in copies of the split sizes: the backend may
    // take them over (gloo moves them).
    std::vector<int64_t> o = recv.counts, i = send.counts;
    for (int64_t& c : o) c *= esize;
    for (int64_t& c : i) c *= esize;
    at::Tensor ob = as_bytes(out), ib = as_bytes(in);
    return group_->alltoall_base(ob, ib, o, i, c10d::AllToAllOptions());
  });
  if (recv.tensors.size() == 1) return;  // gloo wrote the caller's tensor
  int64_t offset = 0;
  for (size_t r = 0; r < recv.tensors.size(); ++r) {
    copy_bits(recv.tensors[r].view({-1}), out.narrow(0, offset, recv.counts[r]));
    offset += recv.counts[r];
  }
}

void HierarchicalPlan::barrier(const core::Context& ctx) const {
  core::barrier(ctx);
  if (layout_.local_rank == 0 && inter_->getSize() > 1) {
    at::Tensor one = at::zeros({1}, at::kFloat);
    remote(ctx, "barrier", [&] {
      std::vector<at::Tensor> ts{one};
      return inter_->allreduce(ts, c10d::AllreduceOptions());
    });
  }
  core::barrier(ctx);
}

}  // namespace pycomm
