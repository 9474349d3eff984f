// c10d's view of one job of the communicator's queue (FrontEnd::launch): wait()
// rethrows pycomm's typed error (CommTimeout, CollectiveMismatch), the future
// holds the output tensors. Point-to-point has a Work of its own
// (frontend_p2p.cpp): its operations complete on the engine, not the queue.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>

#include "../core/call_profile.h"
#include "communicator.h"

namespace pycomm {

// A job's name in the trace: a literal, where c10d's opTypeToString makes a
// string on every call.
inline const char* job_name(c10d::OpType type) {
  switch (type) {
    case c10d::OpType::ALLREDUCE: return "allreduce";
    case c10d::OpType::BROADCAST: return "broadcast";
    case c10d::OpType::REDUCE: return "reduce";
    case c10d::OpType::ALLGATHER: return "allgather";
    case c10d::OpType::_ALLGATHER_BASE: return "_allgather_base";
    case c10d::OpType::ALLGATHER_COALESCED: return "allgather_coalesced";
    case c10d::OpType::REDUCE_SCATTER: return "reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE: return "_reduce_scatter_base";
    case c10d::OpType::ALLTOALL: return "alltoall";
    case c10d::OpType::ALLTOALL_BASE: return "alltoall_base";
    case c10d::OpType::BARRIER: return "barrier";
    case c10d::OpType::GATHER: return "gather";
    case c10d::OpType::SCATTER: return "scatter";
    default: return "collective";
  }
}

class QueuedWork : public c10d::Work {
 public:
  // `comm`: the communicator of a queued job, whose waiter may run it; none
  // for a job already done.
  QueuedWork(int rank, c10d::OpType type, std::shared_ptr<WorkItem> item, std::weak_ptr<Communicator> comm = {})
      : c10d::Work(rank, type), item_(std::move(item)), comm_(std::move(comm)) {}

  bool isCompleted() override { return item_->completed(); }
  bool isSuccess() const override { return item_->completed() && !item_->error(); }
  std::exception_ptr exception() const override { return item_->error(); }
  // pycomm's own deadline bounds every wait; c10d's timeout adds nothing.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    const core::PartTimer timed(core::CallPart::kCall, /*counts=*/false);
    // Not started yet: the waiter runs it, rather than sleep while the worker does.
    if (!item_->completed()) {
      if (auto comm = comm_.lock()) comm->run_if_next(item_);
    }
    item_->wait();
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return item_->future; }
  std::vector<at::Tensor> result() override { return item_->job.outputs; }

 private:
  std::shared_ptr<WorkItem> item_;
  std::weak_ptr<Communicator> comm_;
};

}  // namespace pycomm
