// The stateful communicator exposed to Python: it owns the shared-memory
// transport and one worker thread that runs queued collectives in call order
// and completes a torch Future for each. A synchronous call that finds the
// communicator idle runs in the caller's thread instead, which keeps a small
// all-reduce at a few microseconds.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "../core/allreduce.h"
#include "../core/shm_transport.h"

namespace pycomm {

struct CommunicatorOptions {
  core::TransportConfig transport;
  core::AllReduceTuning tuning;
};

// What to run: a collective and its (already checked) arguments.
struct Collective {
  core::CollectiveKind kind = core::CollectiveKind::kAllReduce;
  at::Tensor tensor;  // keeps the memory alive while the collective runs
  core::AllReduceArgs args;
};

// A collective that went through the queue. `future` completes with the
// tensor (or the error).
struct WorkItem {
  explicit WorkItem(Collective c) : collective(std::move(c)) {}
  Collective collective;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::exception_ptr error;  // the original typed exception, for Work.wait()
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;

  void finish(std::exception_ptr err);  // records the outcome, wakes waiters
  void wait();                          // blocks until done; rethrows the typed exception
};

class Communicator {
 public:
  Communicator(int rank, int world, const std::string& segment_name, bool create,
               const CommunicatorOptions& options);
  ~Communicator();

  // Second half of set-up, once every rank has attached (see pycomm/comm.py).
  void start();
  void unlink_name();

  // Validates, then either runs now (synchronous and idle) or queues. Returns
  // the queued item for async calls, nullptr for synchronous ones.
  std::shared_ptr<WorkItem> all_reduce(const at::Tensor& tensor, const std::string& op,
                                       bool async_op, const std::string& algorithm);
  void barrier();
  void close();

  int rank() const { return transport_->rank(); }
  int world() const { return transport_->world(); }
  const std::string& name() const { return transport_->name(); }
  const CommunicatorOptions& options() const { return options_; }

 private:
  std::shared_ptr<WorkItem> submit(Collective c, bool async_op);
  std::exception_ptr run(const Collective& c);  // the error, or null
  void worker_loop();

  std::unique_ptr<core::ShmTransport> transport_;
  CommunicatorOptions options_;
  core::InputBackup backup_;  // used only by whoever holds busy_

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<WorkItem>> queue_;
  bool busy_ = false;     // a collective runs now, in the worker or a caller
  bool closing_ = false;
  std::thread worker_;
};

}  // namespace pycomm
