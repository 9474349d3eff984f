// FrontEnd's point-to-point: send, recv and recvAnysource on the
// communicator's engine (core/p2p), beside its queue rather than in it, with
// a Work of their own, whose wait drives the engine's progress.
#include <c10/util/Exception.h>

#include <mutex>
#include <optional>

#include "frontend.h"
#include "staged_tensor.h"
#include "tensor_checks.h"

namespace pycomm {
namespace {

using Use = StagedTensor::Use;

// What a send or receive completes: its Future, made only when someone asks.
// dist.send and dist.recv never do, and a Future made and completed with its
// list of tensors on every call would be a share of a small message's cost
// that nobody uses. The operation may complete on the engine's helper before
// or after getFuture().
class P2PCompletion {
 public:
  // `staged`: a receive into a tensor that is not contiguous, written back
  // through the caller's view before anyone sees the operation complete.
  P2PCompletion(std::vector<at::Tensor> tensors, std::optional<StagedTensor> staged)
      : tensors_(std::move(tensors)), staged_(std::move(staged)) {}

  const std::vector<at::Tensor>& tensors() const { return tensors_; }

  // Once, by whichever comes first after the engine finished the operation:
  // its on_done, a wait() or an is_completed() (the engine marks an operation
  // finished before it runs on_done, outside its lock). Later callers wait
  // for the first. Returns the copy's error, if any.
  std::exception_ptr copy_out() {
    if (!staged_) return nullptr;
    std::call_once(copied_, [this] {
      try {
        staged_->copy_out();
      } catch (...) {
        copy_error_ = std::current_exception();
      }
    });
    return copy_error_;
  }

  void complete(std::exception_ptr error) {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      error_ = std::move(error);
      future = future_;
    }
    if (future) finish(*future);
  }

  c10::intrusive_ptr<c10::ivalue::Future> future() {
    bool finish_now = false;
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!future_) {
        future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
        finish_now = done_;  // complete() ran before: nobody else will finish it
      }
      future = future_;
    }
    if (finish_now) finish(*future);
    return future;
  }

 private:
  // Outside mu_: the Future runs its callbacks, which may ask for it again.
  void finish(c10::ivalue::Future& future) {
    if (error_) {
      future.setError(error_);
    } else {
      future.markCompleted(c10::IValue(tensors_));
    }
  }

  const std::vector<at::Tensor> tensors_;
  const std::optional<StagedTensor> staged_;
  std::once_flag copied_;
  std::exception_ptr copy_error_;  // written inside copied_'s call, read after it
  std::mutex mu_;
  bool done_ = false;           // under mu_; error_ is written before it and read after
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// c10d's view of one send or receive: wait() drives the engine's progress in
// the caller's thread (the engine's helper drives it for nobody else).
class P2PWork : public c10d::Work {
 public:
  P2PWork(int rank, c10d::OpType type, std::shared_ptr<Communicator> comm, core::P2PHandle op,
          std::shared_ptr<P2PCompletion> completion)
      : c10d::Work(rank, type),
        comm_(std::move(comm)),
        op_(std::move(op)),
        completion_(std::move(completion)) {}

  // Someone polls instead of waiting: the helper drives it meanwhile.
  bool isCompleted() override {
    if (!op_->done()) {
      comm_->p2p().help(op_);
      if (!op_->done()) return false;
    }
    completion_->copy_out();
    return true;
  }
  bool isSuccess() const override { return op_->done() && !op_->error(); }
  std::exception_ptr exception() const override { return op_->error(); }
  // The engine's deadline (posted + the group's timeout) bounds the wait.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    const core::PartTimer timed(core::CallPart::kCall, /*counts=*/false);
    comm_->p2p().wait(op_);
    if (std::exception_ptr e = completion_->copy_out()) std::rethrow_exception(e);
    return true;
  }
  // Whoever waits on the Future does not drive the engine: the helper does.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    comm_->p2p().help(op_);
    return completion_->future();
  }
  std::vector<at::Tensor> result() override { return completion_->tensors(); }
  // recv_anysource's answer (dist.recv(src=None) returns it).
  int sourceRank() const override { return op_->source; }

 private:
  std::shared_ptr<Communicator> comm_;
  core::P2PHandle op_;
  std::shared_ptr<P2PCompletion> completion_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> FrontEnd::point_to_point(core::P2POp::Kind kind,
                                                       std::vector<at::Tensor>& tensors, int peer,
                                                       int tag) {
  const core::PartTimer timed(core::CallPart::kCall);
  const bool sends = kind == core::P2POp::Kind::kSend;
  const at::Tensor& t = single_tensor(tensors, "tensor");
  // Bytes move as they are, so every dtype goes. A tensor that is not
  // contiguous is staged: a send's copy is made now (a send reads its tensor
  // when posted, as far as the caller can tell), a receive's written back
  // through the caller's view before the operation completes.
  check_tensor(t, "tensor");
  if (!sends) check_writable(t, "tensor");
  std::optional<StagedTensor> staged;
  if (StagedTensor::needed(t)) {
    staged.emplace(t, sends ? Use::kIn : Use::kOut);
    staged->copy_in();
  }
  if (peer != core::P2POp::kAnySource) {
    TORCH_CHECK_VALUE(peer >= 0 && peer < getSize() && peer != getRank(), sends ? "dst" : "src",
                      ": rank ", peer, " is not a peer of rank ", getRank(), " in this group of ",
                      getSize());
  }
  auto op = std::make_shared<core::P2POp>();
  op->kind = kind;
  op->peer = peer;
  op->tag = tag;
  op->data = static_cast<char*>(staged ? staged->flat().data_ptr() : t.data_ptr());
  op->bytes = t.nbytes();
  op->type = uint32_t(t.scalar_type());
  // It holds the tensors until the operation completes, even if the Work is dropped.
  // (A send's staging buffer is held by the completion too: the engine reads it until done.)
  auto completion = std::make_shared<P2PCompletion>(tensors, std::move(staged));
  op->on_done = [completion](const core::P2POp& o) {
    std::exception_ptr error = o.error();
    if (!error) error = completion->copy_out();
    completion->complete(error);
  };
  comm_->p2p().post(op);
  return c10::make_intrusive<P2PWork>(getRank(), sends ? c10d::OpType::SEND : c10d::OpType::RECV, comm_,
                                      std::move(op), std::move(completion));
}

c10::intrusive_ptr<c10d::Work> FrontEnd::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  if (plan_of(core::Collective::kSend, where_of(tensors)) == core::PlanKind::kFallback) {
    return fallback().send(tensors, dst, tag);
  }
  return point_to_point(core::P2POp::Kind::kSend, tensors, dst, tag);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  if (plan_of(core::Collective::kRecv, where_of(tensors)) == core::PlanKind::kFallback) {
    return fallback().recv(tensors, src, tag);
  }
  return point_to_point(core::P2POp::Kind::kRecv, tensors, src, tag);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  if (plan_of(core::Collective::kRecv, where_of(tensors)) == core::PlanKind::kFallback) {
    return fallback().recvAnysource(tensors, tag);
  }
  return point_to_point(core::P2POp::Kind::kRecv, tensors, core::P2POp::kAnySource, tag);
}

}  // namespace pycomm
