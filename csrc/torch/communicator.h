// The stateful communicator: a session, its shared-memory data path, and one
// worker thread that runs queued collectives in call order and completes a
// torch Future for each. A synchronous call that finds the communicator idle
// runs in the caller's thread instead, which keeps a small all-reduce at a few
// microseconds. Used by pycomm.Communicator (module.cpp) and by the c10d
// backend (backend.cpp).
//
// No Python here: the c10d backend calls in from DDP's threads, which do not
// hold the GIL. The binding layer releases the GIL around blocking calls.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../core/collectives/collectives.h"
#include "../core/tuning.h"

namespace pycomm {

// What to run: the collective itself, the tensors it reads and writes (kept
// alive until it finished) and what its future completes with.
struct Job {
  std::function<void(const core::Context&)> body;
  std::vector<at::Tensor> outputs;
  // What the future completes with: by default the output tensor list
  // (c10d's convention); else value() of type value_type, made on the worker
  // once the job succeeded.
  c10::TypePtr value_type;
  std::function<c10::IValue()> value;
};

// A job that went through the queue. `future` completes with its outputs (or
// the error).
struct WorkItem {
  explicit WorkItem(Job j);
  Job job;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::exception_ptr error;  // the original typed exception, for wait()
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;

  void finish(std::exception_ptr err);  // records the outcome, wakes waiters
  void wait();                          // blocks until done; rethrows the typed exception
  bool completed();
};

class Communicator {
 public:
  Communicator(int rank, int world, const std::string& segment_name, bool create,
               const core::CommConfig& config);
  ~Communicator();

  // Second half of set-up, once every rank has attached (see pycomm/rendezvous.py).
  void start();
  void unlink_name();

  // Runs `job` in the caller's thread if nothing is queued or running, and
  // returns true (or throws the job's error). False: the caller queues it.
  // A synchronous call that finds the communicator idle thus skips the thread
  // hop and allocates nothing.
  bool run_if_idle(const Job& job);
  // Queues `job` for the worker thread; its item completes its future.
  std::shared_ptr<WorkItem> enqueue(Job job);
  // Blocks until every queued collective has finished.
  void flush();
  void close();

  int rank() const { return session_->rank(); }
  int world() const { return session_->world(); }
  const std::string& name() const { return session_->name(); }
  const core::CommConfig& config() const { return config_; }

 private:
  std::exception_ptr run(const Job& job);  // the error, or null
  void worker_loop();

  core::CommConfig config_;
  std::unique_ptr<core::Session> session_;
  std::unique_ptr<core::ShmDataPath> path_;
  core::InputBackup backup_;  // used only by whoever holds busy_
  core::Context context_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<WorkItem>> queue_;
  bool busy_ = false;     // a collective runs now, in the worker or a caller
  bool closing_ = false;
  std::chrono::steady_clock::time_point last_run_;  // when the backup was last used
  std::thread worker_;
};

}  // namespace pycomm
