// The stateful communicator: a session, its shared-memory data path, its
// point-to-point engine (which makes its own progress), and one worker thread
// that runs queued collectives in call order and completes a torch Future for
// each. A synchronous call that finds the communicator idle runs in the
// caller's thread instead: a small all-reduce then costs no thread hand-off.
// Used by the c10d front-end (frontend.cpp), which pycomm's own API enters too.
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
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../core/call_profile.h"
#include "../core/collectives/collectives.h"
#include "../core/p2p/p2p_engine.h"
#include "../core/tuning.h"
#include "job_trace.h"

namespace pycomm {

// The CUDA side of a communicator (cuda_path.cpp): made by its first CUDA
// collective, used only by whoever holds busy_.
class CudaPath;
struct CudaPathDelete {
  void operator()(CudaPath* p) const;
};

// What to run: the collective itself, and the tensors it reads and writes
// (kept alive until it finished), which its future completes with (c10d's
// convention).
struct Job {
  std::function<void(const core::Context&)> body;
  std::vector<at::Tensor> outputs;
  // CUDA work: the devices the future's value lives on, and the stream the
  // work ran on (the future's consumers wait for it there).
  std::vector<c10::Device> devices;
  std::optional<c10::Stream> stream;
  // Its name in the job trace (a string literal).
  const char* what = "collective";
  // A blocking call's (no Work is handed out): nobody reads the future's
  // value, so a CPU job's tensors are dropped before the future completes.
  bool blocking = false;
};

// The bytes of a job's output tensors, for the trace.
uint64_t bytes_of(const std::vector<at::Tensor>& tensors);

// A job that went through the queue. `future` completes with its outputs (or
// the error); completing it runs the callbacks chained on it (future.then).
struct WorkItem {
  explicit WorkItem(Job j);
  Job job;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  // Issued by a callback on the completion lane: completed by the worker.
  bool from_lane = false;
  // Its record, when the job trace was on as it was queued.
  bool traced = false;
  JobTimes times;

  // Records the outcome (null: success), then completes the future.
  void finish(std::exception_ptr err);
  // Blocks until the future is completed (not until its callbacks ran);
  // rethrows the original typed exception.
  void wait();
  bool completed() const { return future->completed(); }
  std::exception_ptr error() const;

 private:
  void complete(std::exception_ptr err);  // finish's part that completes the future

  mutable std::mutex mu_;
  std::exception_ptr error_;  // the typed exception, for wait(); set before the future completes
};

// Completes futures off the worker thread, one at a time, in call order: the
// completion lane. A callback chained on a future (future.then) may issue
// further collectives and wait for them (PowerSGD's hook does): the worker
// stays free to run those, and completes their futures itself, at once, rather
// than queue them behind the callback that waits for them.
class Completions {
 public:
  ~Completions();
  void post(std::shared_ptr<WorkItem> item, std::exception_ptr err);
  void stop();  // completes what was posted, then joins the thread
  // Takes the lane's turn for a completion the caller makes itself, if the
  // lane has none queued or running (else false); nothing posted later is
  // completed before release_turn().
  bool take_turn();
  void release_turn();
  // Whether the calling thread is the lane's (a callback runs on it).
  static bool on_lane();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<WorkItem>, std::exception_ptr>> queue_;
  std::thread thread_;
  bool stopping_ = false;
  int unfinished_ = 0;  // posted and not yet completed
  bool turn_taken_ = false;
};

// What a group of `world` ranks with `config` maps: its session segment
// (control, the collectives' slots and links, doorbells), and each
// point-to-point channel, made when a pair first talks.
struct SharedMemoryCost {
  size_t session_bytes;
  size_t channel_bytes;
};
SharedMemoryCost shared_memory_cost(int world, const core::CommConfig& config);

class Communicator {
 public:
  // Rank 0 creates the group's session at `place`; the others attach to it.
  Communicator(int rank, int world, const core::SegmentPlace& place, bool create,
               const core::CommConfig& config);
  ~Communicator();

  // Second half of set-up, once every rank has attached (see pycomm/rendezvous.py).
  void start();
  void unlink_name();
  // Marks the session broken for every rank (their waits fail at once), then
  // closes this communicator.
  void abort(const std::string& reason);

  // Runs body(context) in the caller's thread if nothing is queued or
  // running, and returns true (or throws body's error). False: the caller
  // queues it instead. A synchronous call that finds the communicator idle
  // thus skips the thread hop and allocates nothing. `what` and `bytes`
  // describe it in the job trace.
  template <class Body>
  bool run_if_idle(const Body& body, const char* what, uint64_t bytes) {
    if (!claim_if_idle()) return false;
    JobTimes times;
    if (JobTrace::on()) {
      const uint64_t now = core::monotonic_ns();
      times = JobTimes{what, bytes, false, now, now, 0, 0};
    }
    try {
      const core::PartTimer job(core::CallPart::kJob);
      body(*context_);
    } catch (...) {
      release_claim();
      throw;
    }
    release_claim();
    if (times.queued_ns) {
      times.ended_ns = times.completed_ns = core::monotonic_ns();
      JobTrace::add(times);
    }
    return true;
  }
  // Queues `job` for the worker thread; its item completes its future.
  std::shared_ptr<WorkItem> enqueue(Job job);
  // Runs a queued CPU job in the caller's thread, if it is the next one and
  // nothing runs, and returns true; false: the worker has it or will. A
  // caller that waits for its own job at once (c10d's functional
  // collectives queue every call, then wait) thus skips the hops to the
  // worker and the completion lane.
  bool run_if_next(const std::shared_ptr<WorkItem>& item);
  // Blocks until every queued collective has finished (each is bounded by
  // its deadline).
  void flush();
  void close();

  int rank() const { return session_->rank(); }
  int world() const { return session_->world(); }
  const char* transport() const { return core::transport_name(session_->transport()); }
  // Bytes of point-to-point channels this rank has mapped so far.
  size_t channel_bytes() const { return p2p_->channel_bytes(); }
  const core::CommConfig& config() const { return config_; }
  const core::NumaPlacement& numa_placement() const { return path_->placement(); }
  // Each rank's NUMA node as its CPU affinity has it (-1: not pinned to one
  // node), agreed at set-up (pycomm/rendezvous.py); empty until then.
  const std::vector<int>& numa_nodes() const { return numa_nodes_; }
  void set_numa_nodes(std::vector<int> nodes);
  // Whether the group copies large messages once, straight out of a peer's
  // memory (agreed by every rank at start(): core/transport/cross_memory.h),
  // and why or why not.
  bool single_copy() const { return cma_->enabled(); }
  const std::string& single_copy_reason() const { return cma_->reason(); }
  // The session was aborted or failed: every later collective raises.
  bool broken() const { return session_->aborted(); }
  // Only a collective's body (which holds busy_) may use it.
  std::unique_ptr<CudaPath, CudaPathDelete>& cuda_path() { return cuda_path_; }
  // The session, for what may run beside the collectives in any thread:
  // offering and fetching segments, first_dead_peer(), aborted() (symmetric
  // memory's rendezvous and signal waits).
  core::Session& session() { return *session_; }
  // Point-to-point: any thread, beside the collectives (it has its own lock,
  // progress and channels).
  core::P2PEngine& p2p() { return *p2p_; }

 private:
  std::exception_ptr run(const Job& job);  // the error, or null
  bool claim_if_idle();  // takes busy_ if nothing is queued or running
  void release_claim();
  void worker_loop();

  core::CommConfig config_;
  std::unique_ptr<core::Session> session_;
  std::unique_ptr<core::ShmDataPath> path_;
  std::unique_ptr<core::CrossMemory> cma_;
  core::SingleCopy single_copy_mode_ = core::SingleCopy::kAuto;  // the setting, agreed at start()
  std::unique_ptr<core::P2PChannels> channels_;
  // The collectives' and the point-to-point engine's (declared before it: it
  // outlives the engine). One user at a time; a split that finds it busy runs alone.
  core::ThreadTeam team_;
  std::unique_ptr<core::P2PEngine> p2p_;  // declared after what it uses: destroyed first
  core::InputBackup backup_;  // used only by whoever holds busy_
  std::optional<core::Context> context_;
  std::unique_ptr<CudaPath, CudaPathDelete> cuda_path_;
  std::vector<int> numa_nodes_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<WorkItem>> queue_;
  bool busy_ = false;     // a collective runs now, in the worker or a caller
  bool closing_ = false;
  int flushers_ = 0;      // threads in flush(), woken whenever busy_ clears
  // A collective ran since the worker last woke idle: the backup stays. A flag,
  // not a time, so the hot path reads no clock for it.
  bool ran_since_idle_check_ = false;
  Completions completions_;
  std::thread worker_;
};

}  // namespace pycomm
