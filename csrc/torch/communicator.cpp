#include "communicator.h"

#include "../core/errors.h"

namespace pycomm {
namespace {

// The backup buffer of restore_on_failure is freed after this long unused, so
// one large all-reduce does not pin its size for the life of the process.
constexpr auto kBackupIdle = std::chrono::seconds(1);

c10::TypePtr result_type(const Job& job) {
  return job.value_type ? job.value_type : c10::TypePtr(c10::ListType::create(c10::TensorType::get()));
}

}  // namespace

WorkItem::WorkItem(Job j) : job(std::move(j)) {
  future = c10::make_intrusive<c10::ivalue::Future>(result_type(job));
}

void WorkItem::finish(std::exception_ptr err) {
  error = std::move(err);
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  if (error) {
    future->setError(error);
  } else if (job.value) {
    future->markCompleted(job.value());
  } else {
    future->markCompleted(c10::IValue(job.outputs));
  }
}

void WorkItem::wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (error) std::rethrow_exception(error);
}

bool WorkItem::completed() {
  std::lock_guard<std::mutex> lock(mu);
  return done;
}

Communicator::Communicator(int rank, int world, const std::string& segment_name, bool create,
                           const core::CommConfig& config)
    : config_(config),
      session_(create ? core::Session::create(rank, world, segment_name, config.wait,
                                              core::ShmDataPath::region(world, config.data))
                      : core::Session::attach(rank, world, segment_name, config.wait)),
      path_(std::make_unique<core::ShmDataPath>(*session_)),
      context_{*session_, *path_, backup_, config_.tuning} {}

Communicator::~Communicator() { close(); }

void Communicator::start() {
  session_->start();
  worker_ = std::thread([this] { worker_loop(); });
}

void Communicator::unlink_name() { session_->unlink_name(); }

bool Communicator::run_if_idle(const Job& job) {
  std::unique_lock<std::mutex> lock(mu_);
  if (closing_) throw core::CommError("pycomm: the communicator is closed");
  if (!queue_.empty() || busy_) return false;
  busy_ = true;
  lock.unlock();
  std::exception_ptr error = run(job);
  lock.lock();
  busy_ = false;
  last_run_ = std::chrono::steady_clock::now();
  // Wake the worker only when it has something to do (or close() waits):
  // a needless wake-up costs a context switch on every small collective.
  const bool wake = !queue_.empty() || closing_;
  lock.unlock();
  if (wake) cv_.notify_all();
  if (error) std::rethrow_exception(error);
  return true;
}

std::shared_ptr<WorkItem> Communicator::enqueue(Job job) {
  auto item = std::make_shared<WorkItem>(std::move(job));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) throw core::CommError("pycomm: the communicator is closed");
    queue_.push_back(item);
  }
  cv_.notify_all();
  return item;
}

void Communicator::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

std::exception_ptr Communicator::run(const Job& job) {
  try {
    job.body(context_);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void Communicator::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const bool woken = cv_.wait_for(lock, kBackupIdle, [&] {
      return (!queue_.empty() && !busy_) || (closing_ && !busy_);
    });
    if (!woken) {
      // Idle for a while: give the backup's memory back. busy_ is false here,
      // so no collective uses it.
      if (!busy_ && std::chrono::steady_clock::now() - last_run_ >= kBackupIdle) backup_.release();
      continue;
    }
    if (queue_.empty()) return;  // closing, nothing left
    std::shared_ptr<WorkItem> item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool closing = closing_;
    lock.unlock();
    item->finish(closing ? std::make_exception_ptr(
                               core::CommError("pycomm: the communicator was closed"))
                         : run(item->job));
    // Drop our reference before taking mu_ again: if it is the last one, the
    // tensors' destructors may take the GIL, and a Python thread may hold the
    // GIL while it waits for mu_ in submit(). Lock order: GIL, then mu_ - never
    // the GIL while holding mu_.
    item.reset();
    lock.lock();
    busy_ = false;
    last_run_ = std::chrono::steady_clock::now();
    cv_.notify_all();
  }
}

void Communicator::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    closing_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  // A synchronous collective may still run in another caller's thread.
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
}

}  // namespace pycomm
