#include "hierarchical.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>

#include "../core/errors.h"
#include "dtype_map.h"
#include "tensor_checks.h"

namespace pycomm {
namespace {

// The op the ranks of a host reduce with: avg and premul_sum sum there (the
// factor was applied before; the division comes once, after the inter-host step).
core::ReduceOp host_op(core::ReduceOp op) { return op == core::ReduceOp::kAvg ? core::ReduceOp::kSum : op; }

c10d::ReduceOp c10d_op(core::ReduceOp op) {
  switch (op) {
    case core::ReduceOp::kMax: return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case core::ReduceOp::kMin: return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case core::ReduceOp::kProduct: return c10d::ReduceOp(c10d::ReduceOp::PRODUCT);
    default: return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
}

// Runs one operation of another backend (between hosts, or the group-wide
// fallback) and waits for it. If it fails, this host's session is aborted
// first: the local peers waiting for this rank fail at once, not at their
// deadline. A timeout stays a CommTimeout; anything else is a CommError.
[[noreturn]] void fail_remote(const core::Context& ctx, const char* what, const std::string& reason) {
  const std::string msg = std::string("pycomm: the inter-host step of ") + what + " failed on rank " +
                          std::to_string(ctx.session.rank()) + " of its host: " + reason;
  ctx.session.abort(msg);
  if (reason.find("imed out") != std::string::npos || reason.find("imeout") != std::string::npos) {
    throw core::CommTimeout(msg);
  }
  throw core::CommError(msg);
}

// Issues one operation of another backend (between hosts, or the group-wide
// fallback) without waiting for it. If it fails, this host's session is
// aborted first: the local peers waiting for this rank fail at once, not at
// their deadline. A timeout stays a CommTimeout; anything else is a CommError.
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

at::Tensor flat(const at::Tensor& t) { return t.reshape({-1}); }

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

HierarchicalBackend::HierarchicalBackend(HostLayout layout, std::shared_ptr<Communicator> local,
                                         c10::intrusive_ptr<c10d::Backend> inter,
                                         c10::intrusive_ptr<c10d::Backend> fallback,
                                         size_t leader_max_bytes, size_t piece_bytes)
    : Backend(layout.rank, layout.world(), std::move(local), std::move(fallback)),
      layout_(std::move(layout)),
      inter_(std::move(inter)),
      leader_max_bytes_(leader_max_bytes),
      piece_bytes_(std::max<size_t>(piece_bytes, 1)) {
  TORCH_CHECK_VALUE(communicator()->world() == layout_.local_size() &&
                        communicator()->rank() == layout_.local_rank,
                    "communicator: rank ", communicator()->rank(), " of ", communicator()->world(),
                    ", expected ", layout_.local_rank, " of ", layout_.local_size(), " (this host's ranks)");
}

const char* HierarchicalBackend::all_reduce_algorithm(bool uniform, int local_size, size_t count,
                                                      size_t bytes, size_t leader_max_bytes) {
  return uniform && bytes > leader_max_bytes && count >= size_t(local_size) ? "rs-ar-ag" : "leader";
}

// ---------------------------------------------------------------- the job bodies

void HierarchicalBackend::inter_all_reduce(const core::Context& ctx, const at::Tensor& t,
                                           core::ReduceOp op) const {
  if (inter_->getSize() > 1 && t.numel() > 0) {
    remote(ctx, "all_reduce", [&] {
      std::vector<at::Tensor> ts{t};
      c10d::AllreduceOptions o;
      o.reduceOp = c10d_op(op);
      return inter_->allreduce(ts, o);
    });
  }
  if (op == core::ReduceOp::kAvg) t.div_(getSize());
}

void HierarchicalBackend::leader_all_reduce(const core::Context& ctx, const at::Tensor& t,
                                            core::ReduceOp op) const {
  core::ReduceArgs r;
  r.dtype = check_tensor(t, "tensor");
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

void HierarchicalBackend::all_reduce_now(const core::Context& ctx, const at::Tensor& t,
                                         const Reduction& red) const {
  if (red.premul) t.mul_(red.factor);
  const int64_t n = t.numel();
  const int L = layout_.local_size();
  const core::DType dtype = check_tensor(t, "tensor");
  const size_t bytes = size_t(n) * core::dtype_size(dtype);
  const bool split =
      std::string(all_reduce_algorithm(layout_.uniform, L, size_t(n), bytes, leader_max_bytes_)) ==
      "rs-ar-ag";
  // The part that splits into L equal shards goes reduce-scatter / all-reduce /
  // all-gather; the few elements left over go through the leaders.
  const int64_t main = split ? n / L * L : 0;
  if (main > 0) {
    // In pieces, pipelined: while gloo reduces piece k between hosts (on its
    // own threads), this rank reduce-scatters piece k+1 and all-gathers piece
    // k-1 in shared memory. Piece boundaries fall on multiples of L elements,
    // the same on every rank.
    const int64_t units = main / L;
    const int64_t esize = int64_t(core::dtype_size(dtype));
    const int64_t per_piece = std::max<int64_t>(1, int64_t(piece_bytes_) / (esize * L));
    const int64_t pieces = (units + per_piece - 1) / per_piece;
    at::Tensor part = at::empty({units}, t.options());
    char* base = static_cast<char*>(t.data_ptr());
    std::vector<c10::intrusive_ptr<c10d::Work>> works(static_cast<size_t>(pieces));
    auto gather = [&](int64_t k) {
      const int64_t u0 = k * per_piece, m = std::min(per_piece, units - u0);
      at::Tensor shard = part.narrow(0, u0, m);
      if (works[size_t(k)]) wait_remote(ctx, "all_reduce", works[size_t(k)]);
      works[size_t(k)].reset();
      if (red.op == core::ReduceOp::kAvg) shard.div_(getSize());
      core::AllGatherArgs ag;
      ag.dtype = dtype;
      ag.input = shard.data_ptr();
      ag.output = base + u0 * L * esize;
      ag.count = size_t(m);
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
      rs.op = host_op(red.op);
      core::reduce_scatter(ctx, rs);
      if (inter_->getSize() > 1) {
        works[size_t(k)] = issue_remote(ctx, "all_reduce", [&] {
          std::vector<at::Tensor> ts{shard};
          c10d::AllreduceOptions o;
          o.reduceOp = c10d_op(red.op);
          return inter_->allreduce(ts, o);
        });
      }
      if (k > 0) gather(k - 1);
    }
    gather(pieces - 1);
  }
  if (main < n || n == 0) leader_all_reduce(ctx, t.narrow(0, main, n - main), red.op);
}

void HierarchicalBackend::all_gather_now(const core::Context& ctx, const at::Tensor& in,
                                         const at::Tensor& out) const {
  if (!layout_.uniform) {
    remote(ctx, "all_gather", [&] {
      at::Tensor o = out, i = in;
      return fallback_backend()->_allgather_base(o, i, c10d::AllgatherOptions());
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
    at::Tensor i = in;
    return inter_->_allgather_base(across, i, c10d::AllgatherOptions());
  });
  at::Tensor all = at::empty({int64_t(L) * H * c}, in.options());
  core::AllGatherArgs ag;
  ag.dtype = check_tensor(in, "input_tensor");
  ag.input = across.data_ptr();
  ag.output = all.data_ptr();
  ag.count = size_t(int64_t(H) * c);
  core::all_gather(ctx, ag);
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h) {
      const int g = layout_.hosts[size_t(h)][size_t(l)];
      out.narrow(0, int64_t(g) * c, c).copy_(all.narrow(0, (int64_t(l) * H + h) * c, c));
    }
  }
}

void HierarchicalBackend::reduce_scatter_now(const core::Context& ctx, const at::Tensor& in,
                                             const at::Tensor& out, const Reduction& red) const {
  const int64_t c = out.numel();
  if (c == 0) return;  // the same on every rank: nothing to move
  at::Tensor src = red.premul ? in.mul(red.factor) : in;
  if (!layout_.uniform) {
    remote(ctx, "reduce_scatter", [&] {
      at::Tensor o = out;
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = c10d_op(red.op);
      return fallback_backend()->_reduce_scatter_base(o, src, opts);
    });
    if (red.op == core::ReduceOp::kAvg) out.div_(getSize());
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
      perm.narrow(0, (int64_t(l) * H + h) * c, c).copy_(src.narrow(0, int64_t(g) * c, c));
    }
  }
  at::Tensor part = at::empty({int64_t(H) * c}, in.options());
  core::ReduceScatterArgs rs;
  rs.dtype = check_tensor(out, "output");
  rs.input = perm.data_ptr();
  rs.output = part.data_ptr();
  rs.count = size_t(int64_t(H) * c);
  rs.op = host_op(red.op);
  core::reduce_scatter(ctx, rs);
  if (inter_->getSize() > 1) {
    remote(ctx, "reduce_scatter", [&] {
      at::Tensor o = out;
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = c10d_op(red.op);
      return inter_->_reduce_scatter_base(o, part, opts);
    });
  } else {
    out.copy_(part);
  }
  if (red.op == core::ReduceOp::kAvg) out.div_(getSize());
}

// ---------------------------------------------------------------- the collectives

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  if (any_cuda(tensors)) return fallback().allreduce_coalesced(tensors, opts);
  Reduction red;
  if (!reduction_of(opts.reduceOp, &red)) return fallback().allreduce_coalesced(tensors, opts);
  std::vector<at::Tensor> flats;
  for (const auto& t : tensors) {
    check_op_for_dtype(red.op, red.premul, check_tensor(t, "tensor"));
    flats.push_back(flat(t));
  }
  Job job;
  job.outputs = tensors;
  job.body = [this, flats, red](const core::Context& ctx) {
    for (const auto& t : flats) all_reduce_now(ctx, t, red);
  };
  return launch(c10d::OpType::ALLREDUCE, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                              const c10d::BroadcastOptions& opts) {
  if (any_cuda(tensors)) return fallback().broadcast(tensors, opts);
  const at::Tensor& t = single_tensor(tensors, "tensor");
  const core::DType dtype = check_tensor(t, "tensor");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "src: rank ", opts.rootRank,
                    " is not in this group of ", getSize());
  const int root_host = layout_.host_of[size_t(opts.rootRank)];
  const int root_local = layout_.local_of[size_t(opts.rootRank)];
  Job job;
  job.outputs = tensors;
  job.body = [this, t = flat(t), dtype, root_host, root_local](const core::Context& ctx) {
    core::BroadcastArgs b;
    b.dtype = dtype;
    b.data = t.data_ptr();
    b.count = size_t(t.numel());
    b.restore = false;
    // The root's host first, then its leader to the other leaders, then
    // each other host from its leader.
    if (layout_.host == root_host) {
      b.root = root_local;
      core::broadcast(ctx, b);
    }
    if (layout_.local_rank == 0 && inter_->getSize() > 1 && t.numel() > 0) {
      remote(ctx, "broadcast", [&] {
        std::vector<at::Tensor> ts{t};
        c10d::BroadcastOptions o;
        o.rootRank = root_host;
        return inter_->broadcast(ts, o);
      });
    }
    if (layout_.host != root_host) {
      b.root = 0;
      core::broadcast(ctx, b);
    }
  };
  return launch(c10d::OpType::BROADCAST, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::reduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::ReduceOptions& opts) {
  if (any_cuda(tensors)) return fallback().reduce(tensors, opts);
  Reduction red;
  if (!reduction_of(opts.reduceOp, &red)) return fallback().reduce(tensors, opts);
  const at::Tensor& t = single_tensor(tensors, "tensor");
  check_op_for_dtype(red.op, red.premul, check_tensor(t, "tensor"));
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "dst: rank ", opts.rootRank,
                    " is not in this group of ", getSize());
  const bool root = opts.rootRank == getRank();
  Job job;
  job.outputs = tensors;
  // An all-reduce on a copy: the other ranks' tensors are not to be written.
  job.body = [this, t = flat(t), red, root](const core::Context& ctx) {
    at::Tensor work = t.clone();
    all_reduce_now(ctx, work, red);
    if (root) t.copy_(work);
  };
  return launch(c10d::OpType::REDUCE, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (any_cuda(outputs) || any_cuda(inputs)) {
    return fallback().allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  check_all_gather_pairs(outputs, inputs, getSize());
  std::vector<at::Tensor> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(flat(inputs[i]));
    outs.push_back(flat(outputs[i]));
  }
  Job job;
  job.outputs = outputs;
  job.body = [this, ins, outs](const core::Context& ctx) {
    for (size_t i = 0; i < ins.size(); ++i) all_gather_now(ctx, ins[i], outs[i]);
  };
  return launch(c10d::OpType::_ALLGATHER_BASE, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (any_cuda(outputs) || any_cuda(inputs)) return fallback().allgather_coalesced(outputs, inputs, opts);
  check_all_gather_lists(outputs, inputs, getSize());
  std::vector<at::Tensor> ins, all_outputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    all_outputs.insert(all_outputs.end(), outputs[i].begin(), outputs[i].end());
    ins.push_back(flat(inputs[i]));
  }
  Job job;
  job.outputs = all_outputs;
  job.body = [this, ins, outputs](const core::Context& ctx) {
    for (size_t i = 0; i < ins.size(); ++i) {
      const int64_t n = ins[i].numel();
      at::Tensor gathered = at::empty({n * getSize()}, ins[i].options());
      all_gather_now(ctx, ins[i], gathered);
      for (size_t r = 0; r < outputs[i].size(); ++r) {
        outputs[i][r].view({-1}).copy_(gathered.narrow(0, int64_t(r) * n, n));
      }
    }
  };
  return launch(c10d::OpType::ALLGATHER, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  if (any_cuda(outputs) || any_cuda(inputs)) {
    return fallback().reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  Reduction red;
  if (!reduction_of(opts.reduceOp, &red)) {
    return fallback().reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  check_reduce_scatter_pairs(outputs, inputs, getSize(), red.op, red.premul);
  std::vector<at::Tensor> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(flat(inputs[i]));
    outs.push_back(flat(outputs[i]));
  }
  Job job;
  job.outputs = outputs;
  job.body = [this, ins, outs, red](const core::Context& ctx) {
    for (size_t i = 0; i < ins.size(); ++i) reduce_scatter_now(ctx, ins[i], outs[i], red);
  };
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  if (any_cuda(outputs) || any_cuda(inputs)) return fallback().reduce_scatter(outputs, inputs, opts);
  Reduction red;
  if (!reduction_of(opts.reduceOp, &red)) return fallback().reduce_scatter(outputs, inputs, opts);
  check_reduce_scatter_list(outputs, inputs, getSize(), red.op, red.premul);
  const at::Tensor& out = outputs[0];
  Job job;
  job.outputs = outputs;
  job.body = [this, out = flat(out), list = inputs[0], red](const core::Context& ctx) {
    // Concatenated on the worker, in call order (an earlier queued collective
    // may write the inputs).
    std::vector<at::Tensor> parts;
    for (const auto& t : list) parts.push_back(t.reshape({-1}));
    reduce_scatter_now(ctx, at::cat(parts), out, red);
  };
  return launch(c10d::OpType::REDUCE_SCATTER, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  if (output.is_cuda() || input.is_cuda()) {
    return fallback().alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
  }
  check_all_to_all_single(output, input);
  // Between hosts the exchange is the inter-host engine's, group-wide.
  Job job;
  job.outputs = {output};
  job.body = [this, output, input, os = output_split_sizes, is = input_split_sizes](
                 const core::Context& ctx) mutable {
    remote(ctx, "all_to_all", [&] {
      return fallback_backend()->alltoall_base(output, input, os, is, c10d::AllToAllOptions());
    });
  };
  return launch(c10d::OpType::ALLTOALL_BASE, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllToAllOptions& opts) {
  if (any_cuda(outputs) || any_cuda(inputs)) return fallback().alltoall(outputs, inputs, opts);
  check_all_to_all_lists(outputs, inputs, getSize());
  // As one all_to_all_single with split sizes in elements: gloo runs that form.
  Job job;
  job.outputs = outputs;
  job.body = [this, outputs, inputs](const core::Context& ctx) {
    std::vector<at::Tensor> ins;
    std::vector<int64_t> is, os;
    int64_t out_total = 0;
    for (size_t r = 0; r < inputs.size(); ++r) {
      ins.push_back(inputs[r].reshape({-1}));
      is.push_back(inputs[r].numel());
      os.push_back(outputs[r].numel());
      out_total += outputs[r].numel();
    }
    at::Tensor in = at::cat(ins);
    at::Tensor out = at::empty({out_total}, in.options());
    remote(ctx, "all_to_all", [&] {
      // Copies: the backend may take its split sizes over (gloo moves them).
      std::vector<int64_t> o = os, i = is;
      return fallback_backend()->alltoall_base(out, in, o, i, c10d::AllToAllOptions());
    });
    int64_t offset = 0;
    for (size_t r = 0; r < outputs.size(); ++r) {
      at::Tensor dst = outputs[r];
      dst.view({-1}).copy_(out.narrow(0, offset, os[r]));
      offset += os[r];
    }
  };
  return launch(c10d::OpType::ALLTOALL, std::move(job), opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> HierarchicalBackend::barrier(const c10d::BarrierOptions& opts) {
  Job job;
  job.body = [this](const core::Context& ctx) {
    core::barrier(ctx);
    if (layout_.local_rank == 0 && inter_->getSize() > 1) {
      at::Tensor one = at::zeros({1}, at::kFloat);
      remote(ctx, "barrier", [&] {
        std::vector<at::Tensor> ts{one};
        return inter_->allreduce(ts, c10d::AllreduceOptions());
      });
    }
    core::barrier(ctx);
  };
  return launch(c10d::OpType::BARRIER, std::move(job), opts.asyncOp);
}

}  // namespace pycomm
