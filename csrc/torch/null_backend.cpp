#include "null_backend.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace pycomm {
namespace {

// Done when made. Its future is made only when asked for, as the cheapest
// real backend's would be: dist.* with async_op=False asks for none.
class DoneWork : public c10d::Work {
 public:
  DoneWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), outputs_(std::move(outputs)) {}
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto f = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    f->markCompleted(c10::IValue(outputs_));
    return f;
  }

 private:
  std::vector<at::Tensor> outputs_;
};

class NullBackend : public c10d::Backend {
 public:
  using Work = c10::intrusive_ptr<c10d::Work>;
  NullBackend(int rank, int size) : c10d::Backend(rank, size) {}
  const std::string getBackendName() const override { return "pycomm_null"; }

  Work broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions&) override {
    return done(c10d::OpType::BROADCAST, t);
  }
  Work allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions&) override {
    return done(c10d::OpType::ALLREDUCE, t);
  }
  Work allreduce_coalesced(std::vector<at::Tensor>& t, const c10d::AllreduceCoalescedOptions&) override {
    return done(c10d::OpType::ALLREDUCE_COALESCED, t);
  }
  Work reduce(std::vector<at::Tensor>& t, const c10d::ReduceOptions&) override {
    return done(c10d::OpType::REDUCE, t);
  }
  Work allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>&,
                 const c10d::AllgatherOptions&) override {
    return done(c10d::OpType::ALLGATHER, out.empty() ? std::vector<at::Tensor>{} : out[0]);
  }
  Work _allgather_base(at::Tensor& out, at::Tensor&, const c10d::AllgatherOptions&) override {
    return done(c10d::OpType::_ALLGATHER_BASE, {out});
  }
  Work allgather_into_tensor_coalesced(std::vector<at::Tensor>& out, std::vector<at::Tensor>&,
                                       const c10d::AllgatherOptions&) override {
    return done(c10d::OpType::COALESCED, out);
  }
  Work reduce_scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>&,
                      const c10d::ReduceScatterOptions&) override {
    return done(c10d::OpType::REDUCE_SCATTER, out);
  }
  Work _reduce_scatter_base(at::Tensor& out, at::Tensor&, const c10d::ReduceScatterOptions&) override {
    return done(c10d::OpType::_REDUCE_SCATTER_BASE, {out});
  }
  Work reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& out, std::vector<at::Tensor>&,
                                       const c10d::ReduceScatterOptions&) override {
    return done(c10d::OpType::COALESCED, out);
  }
  Work alltoall_base(at::Tensor& out, at::Tensor&, std::vector<int64_t>&, std::vector<int64_t>&,
                     const c10d::AllToAllOptions&) override {
    return done(c10d::OpType::ALLTOALL_BASE, {out});
  }
  Work alltoall(std::vector<at::Tensor>& out, std::vector<at::Tensor>&, const c10d::AllToAllOptions&) override {
    return done(c10d::OpType::ALLTOALL, out);
  }
  Work barrier(const c10d::BarrierOptions&) override { return done(c10d::OpType::BARRIER, {}); }
  Work gather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>&,
              const c10d::GatherOptions&) override {
    return done(c10d::OpType::GATHER, out.empty() ? std::vector<at::Tensor>{} : out[0]);
  }
  Work scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>&,
               const c10d::ScatterOptions&) override {
    return done(c10d::OpType::SCATTER, out);
  }
  Work send(std::vector<at::Tensor>& t, int, int) override { return done(c10d::OpType::SEND, t); }
  Work recv(std::vector<at::Tensor>& t, int, int) override { return done(c10d::OpType::RECV, t); }
  Work recvAnysource(std::vector<at::Tensor>& t, int) override { return done(c10d::OpType::RECVANYSOURCE, t); }

 private:
  Work done(c10d::OpType type, std::vector<at::Tensor> outputs) {
    return c10::make_intrusive<DoneWork>(getRank(), type, std::move(outputs));
  }
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_null_backend(int rank, int size) {
  return c10::make_intrusive<NullBackend>(rank, size);
}

}  // namespace pycomm
