#include "communicator.h"

#include <c10/core/StreamGuard.h>
#include <sched.h>

#include <string>

#include "../core/errors.h"
#include "../core/thread_name.h"

namespace pycomm {
namespace {

// The backup buffer of restore_on_failure is freed after one to two of these
// with no collective, so one large all-reduce does not pin its size for the
// life of the process.
constexpr auto kBackupIdle = std::chrono::seconds(1);

// What the creator reserves: the collectives' data path, then the
// point-to-point channels.
core::DataRegion region_of(int world, const core::CommConfig& config) {
  core::DataRegion region = core::ShmDataPath::region(world, config.data);
  core::P2PChannels::reserve(region, world, config.p2p);
  return region;
}

// A team's helper spins between pieces only while the host has a core for it:
// on oversubscribed cores its spin takes the time slice that its rank's caller
// or a peer needs (2 ranks x 2 threads on 2 cores: 16 MiB all-reduce 7.1 ms
// with the stream's 64 us spin, 4.5 ms without; 1.5 ms with no team at all;
// measured once, 2026-12-04: bench/team_perf.py times team sizes, not the spin).
double team_spin_us(const core::CommConfig& config, int world) {
  cpu_set_t set;
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return size_t(world) * config.tuning.team_threads <= size_t(cores) ? config.wait.stream_spin_us : 0.0;
}

}  // namespace

SharedMemoryCost shared_memory_cost(int world, const core::CommConfig& config) {
  const core::DataRegion region = region_of(world, config);
  return {core::Session::segment_bytes(world, region), core::P2PChannels::channel_bytes(region)};
}

thread_local bool t_on_lane = false;

uint64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  uint64_t n = 0;
  for (const auto& t : tensors) n += uint64_t(t.nbytes());
  return n;
}

WorkItem::WorkItem(Job j) : job(std::move(j)) {
  future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                    job.devices);
}

void WorkItem::finish(std::exception_ptr err) {
  complete(std::move(err));
  if (traced) {
    times.completed_ns = core::monotonic_ns();  // markCompleted ran the callbacks
    JobTrace::add(times);
  }
}

void WorkItem::complete(std::exception_ptr err) {
  // A CUDA future records its completion on the current stream of its device:
  // make that the stream the work ran on.
  c10::OptionalStreamGuard on_stream(job.stream);
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = err;
  }
  if (job.blocking && job.devices.empty()) {
    // Its caller returns once the future completes, while this thread still
    // holds the item: holding the tensors too, it would keep one that the
    // caller frees at once (a symmetric buffer and its mappings) a moment
    // past its free.
    job.body = nullptr;
    job.outputs.clear();
  }
  if (err) {
    future->setError(err);
  } else {
    future->markCompleted(c10::IValue(job.outputs));
  }
}

void WorkItem::wait() {
  future->wait();
  if (std::exception_ptr err = error()) std::rethrow_exception(err);
}

std::exception_ptr WorkItem::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

Completions::~Completions() { stop(); }

bool Completions::on_lane() { return t_on_lane; }

void Completions::post(std::shared_ptr<WorkItem> item, std::exception_ptr err) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(item), std::move(err));
    ++unfinished_;
    if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_one();
}

void Completions::loop() {
  t_on_lane = true;
  core::name_this_thread("pycomm-lane");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return (!queue_.empty() || stopping_) && !turn_taken_; });
    if (queue_.empty()) return;  // stopping, nothing left
    auto [item, err] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    item->finish(std::move(err));
    // Dropped before retaking mu_: the last reference to a tensor may take the
    // GIL in its destructor (lock order: GIL, then mu_).
    item.reset();
    lock.lock();
    --unfinished_;
  }
}

bool Completions::take_turn() {
  std::lock_guard<std::mutex> lock(mu_);
  if (unfinished_ > 0 || turn_taken_) return false;
  turn_taken_ = true;
  return true;
}

void Completions::release_turn() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    turn_taken_ = false;
  }
  cv_.notify_all();
}

void Completions::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Communicator::Communicator(int rank, int world, const core::SegmentPlace& place, bool create,
                           const core::CommConfig& config)
    : config_(config),
      session_(create ? core::Session::create(rank, world, place, config.wait, region_of(world, config))
                      : core::Session::attach(rank, world, place, config.wait)),
      team_(int(config.tuning.team_threads), config.tuning.team_share_bytes, team_spin_us(config, world)) {
  try {
    if (!core::parse_single_copy(config_.tuning.single_copy, &single_copy_mode_)) {
      throw core::InvalidArgument("single_copy: expected auto, cma or off, got '" + config_.tuning.single_copy + "'");
    }
    path_ = std::make_unique<core::ShmDataPath>(*session_);
    cma_ = std::make_unique<core::CrossMemory>(*session_);
    channels_ = std::make_unique<core::P2PChannels>(*session_);
    p2p_ = std::make_unique<core::P2PEngine>(
        *channels_, [](uint32_t type) { return std::string(c10::toString(c10::ScalarType(type))); }, &team_,
        cma_.get(), config_.tuning.single_copy_min_bytes);
  } catch (...) {
    // Nobody else knows the place yet: remove its name, or it stays in /dev/shm.
    if (create) session_->unlink_name();
    throw;
  }
  context_.emplace(core::Context{*session_, *path_, backup_, config_.tuning, team_, *cma_});
}

Communicator::~Communicator() { close(); }

void Communicator::start() {
  session_->start();
  cma_->agree(single_copy_mode_);
  worker_ = std::thread([this] { worker_loop(); });
}

void Communicator::unlink_name() { session_->unlink_name(); }

void Communicator::set_numa_nodes(std::vector<int> nodes) {
  if (int(nodes.size()) != world()) {
    throw core::InvalidArgument("numa_nodes: " + std::to_string(nodes.size()) + " nodes for " +
                                std::to_string(world()) + " ranks");
  }
  numa_nodes_ = std::move(nodes);
}

void Communicator::abort(const std::string& reason) {
  session_->abort(reason);
  close();
}

bool Communicator::claim_if_idle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_) throw core::CommError("rank " + std::to_string(rank()) + ": the communicator is closed");
  if (!queue_.empty() || busy_) return false;
  busy_ = true;
  return true;
}

void Communicator::release_claim() {
  std::unique_lock<std::mutex> lock(mu_);
  busy_ = false;
  ran_since_idle_check_ = true;
  // Wake the worker only when it has something to do (or close() or flush()
  // waits): a needless wake-up costs a context switch on every small collective.
  const bool wake = !queue_.empty() || closing_ || flushers_ > 0;
  lock.unlock();
  if (wake) cv_.notify_all();
}

std::shared_ptr<WorkItem> Communicator::enqueue(Job job) {
  auto item = std::make_shared<WorkItem>(std::move(job));
  item->from_lane = Completions::on_lane();
  if (JobTrace::on()) {
    item->traced = true;
    item->times = JobTimes{item->job.what, bytes_of(item->job.outputs), true, core::monotonic_ns(), 0, 0, 0};
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) throw core::CommError("rank " + std::to_string(rank()) + ": the communicator is closed");
    queue_.push_back(item);
  }
  cv_.notify_all();
  return item;
}

bool Communicator::run_if_next(const std::shared_ptr<WorkItem>& item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A CUDA job runs on the worker, whose streams and devices it was made for.
    if (closing_ || busy_ || queue_.empty() || queue_.front() != item || !item->job.devices.empty())
      return false;
    queue_.pop_front();
    busy_ = true;
  }
  if (item->traced) item->times.started_ns = core::monotonic_ns();
  std::exception_ptr err = run(item->job);
  if (item->traced) item->times.ended_ns = core::monotonic_ns();
  // Futures complete in call order: here only if the lane holds no earlier
  // one, and then nothing later completes before this one. Completed after
  // busy_ clears, as the worker's are, so a callback may issue and wait for
  // further collectives.
  const bool here = item->from_lane || completions_.take_turn();
  if (!here) completions_.post(item, err);
  release_claim();
  if (here) {
    item->finish(std::move(err));
    if (!item->from_lane) completions_.release_turn();
  }
  return true;
}

void Communicator::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  ++flushers_;
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  --flushers_;
}

std::exception_ptr Communicator::run(const Job& job) {
  const core::PartTimer timer(core::CallPart::kJob);
  try {
    job.body(*context_);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void Communicator::worker_loop() {
  core::name_this_thread("pycomm-worker");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const bool woken = cv_.wait_for(lock, kBackupIdle, [&] {
      return (!queue_.empty() && !busy_) || (closing_ && !busy_);
    });
    if (!woken) {
      // No collective for a whole period: give the backup's memory back.
      // busy_ is false here, so no collective uses it.
      if (!busy_ && !ran_since_idle_check_) backup_.release();
      ran_since_idle_check_ = false;
      continue;
    }
    if (queue_.empty()) return;  // closing, nothing left
    std::shared_ptr<WorkItem> item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool closing = closing_;
    lock.unlock();
    if (item->traced) item->times.started_ns = core::monotonic_ns();
    std::exception_ptr err =
        closing ? std::make_exception_ptr(core::CommError("rank " + std::to_string(rank()) +
                                                          ": the communicator was closed"))
                : run(item->job);
    if (item->traced) item->times.ended_ns = core::monotonic_ns();
    if (item->from_lane) {
      // A callback on the lane waits for this one: complete it here.
      item->finish(std::move(err));
      item.reset();  // before retaking mu_ (see Completions::loop)
    } else {
      // The lane owns the item from here, so this thread holds no tensor that
      // could take the GIL.
      completions_.post(std::move(item), std::move(err));
    }
    lock.lock();
    busy_ = false;
    ran_since_idle_check_ = true;
    cv_.notify_all();
  }
}

void Communicator::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    closing_ = true;
  }
  p2p_->close();
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  {
    // A synchronous collective may still run in another caller's thread.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
  }
  completions_.stop();
}

}  // namespace pycomm
