#include "communicator.h"

#include <pybind11/pybind11.h>

#include <sstream>

#include "../core/errors.h"
#include "dtype_map.h"

namespace py = pybind11;

namespace pycomm {
namespace {

// Argument errors name the argument and are raised before anything is sent.
void check_tensor(const at::Tensor& t, core::DType* dtype) {
  if (!t.defined()) throw py::type_error("tensor: expected a tensor, got an undefined tensor");
  if (t.layout() != at::kStrided) {
    std::ostringstream os;
    os << "tensor: sparse and other non-strided layouts are not supported, got " << t.layout();
    throw py::type_error(os.str());
  }
  if (!t.device().is_cpu()) {
    std::ostringstream os;
    os << "tensor: expected a CPU tensor (the shared-memory transport), got device " << t.device();
    throw py::type_error(os.str());
  }
  if (!to_core_dtype(t.scalar_type(), dtype)) {
    std::ostringstream os;
    os << "tensor: unsupported dtype " << t.scalar_type() << "; supported: " << kSupportedDtypes;
    throw py::type_error(os.str());
  }
  if (!t.is_contiguous()) {
    std::ostringstream os;
    os << "tensor: must be contiguous, got sizes " << t.sizes() << " and strides " << t.strides();
    throw py::value_error(os.str());
  }
  if (t.is_conj() || t.is_neg()) throw py::value_error("tensor: resolve conj/neg views first");
}

}  // namespace

void WorkItem::finish(std::exception_ptr err) {
  error = std::move(err);
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  if (error) {
    future->setError(error);
  } else {
    future->markCompleted(c10::IValue(collective.tensor));
  }
}

void WorkItem::wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (error) std::rethrow_exception(error);
}

Communicator::Communicator(int rank, int world, const std::string& segment_name, bool create,
                           const CommunicatorOptions& options)
    : options_(options) {
  transport_ = create ? core::ShmTransport::create(rank, world, segment_name, options.transport)
                      : core::ShmTransport::attach(rank, world, segment_name, options.transport);
}

Communicator::~Communicator() { close(); }

void Communicator::start() {
  transport_->start();
  worker_ = std::thread([this] { worker_loop(); });
}

void Communicator::unlink_name() { transport_->unlink_name(); }

std::shared_ptr<WorkItem> Communicator::all_reduce(const at::Tensor& tensor, const std::string& op,
                                                   bool async_op, const std::string& algorithm) {
  Collective c;
  if (!to_core_op(op, &c.args.op)) {
    throw py::value_error("op: unknown reduction '" + op +
                          "'; expected one of sum, avg, max, min, product");
  }
  if (!to_core_algorithm(algorithm, &c.args.algorithm)) {
    throw py::value_error("algorithm: unknown algorithm '" + algorithm +
                          "'; expected one of auto, ring, direct");
  }
  check_tensor(tensor, &c.args.dtype);
  if (c.args.op == core::ReduceOp::kAvg && !core::is_floating(c.args.dtype)) {
    // gloo rejects AVG outright; for integers a rounding rule would have to be
    // invented, so ask for an explicit sum instead.
    throw py::value_error("op: 'avg' is not defined for integer tensors (dtype " +
                          std::string(core::dtype_name(c.args.dtype)) +
                          "); use op='sum' and divide");
  }
  c.tensor = tensor;
  c.args.data = tensor.data_ptr();
  c.args.count = size_t(tensor.numel());
  return submit(std::move(c), async_op);
}

void Communicator::barrier() {
  Collective c;
  c.kind = core::CollectiveKind::kBarrier;
  submit(std::move(c), false);
}

std::shared_ptr<WorkItem> Communicator::submit(Collective c, bool async_op) {
  std::unique_lock<std::mutex> lock(mu_);
  if (closing_) throw core::CommError("pycomm: the communicator is closed");
  if (!async_op && queue_.empty() && !busy_) {
    // Idle and synchronous: run here, without a thread hop or a queued item.
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    {
      py::gil_scoped_release no_gil;
      error = run(c);
    }
    lock.lock();
    busy_ = false;
    // Wake the worker only when it has something to do (or close() waits):
    // a needless wake-up costs a context switch on every small collective.
    const bool wake = !queue_.empty() || closing_;
    lock.unlock();
    if (wake) cv_.notify_all();
    if (error) std::rethrow_exception(error);
    return nullptr;
  }
  auto item = std::make_shared<WorkItem>(std::move(c));
  item->future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
  queue_.push_back(item);
  lock.unlock();
  cv_.notify_all();
  if (async_op) return item;
  py::gil_scoped_release no_gil;
  item->wait();
  return nullptr;
}

std::exception_ptr Communicator::run(const Collective& c) {
  try {
    if (c.kind == core::CollectiveKind::kBarrier) {
      core::barrier(*transport_);
    } else {
      core::all_reduce(*transport_, c.args, options_.tuning, backup_);
    }
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void Communicator::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return (!queue_.empty() && !busy_) || (closing_ && !busy_); });
    if (queue_.empty()) return;  // closing, nothing left
    std::shared_ptr<WorkItem> item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool closing = closing_;
    lock.unlock();
    item->finish(closing ? std::make_exception_ptr(
                               core::CommError("pycomm: the communicator was closed"))
                         : run(item->collective));
    // Drop our reference before taking mu_ again: if it is the last one, the
    // tensor's destructor takes the GIL, and a Python thread may hold the GIL
    // while it waits for mu_ in submit(). Lock order: GIL, then mu_ - never
    // the GIL while holding mu_.
    item.reset();
    lock.lock();
    busy_ = false;
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
  auto drain = [&] {
    if (worker_.joinable()) worker_.join();
    // A synchronous collective may still run in another caller's thread.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
  };
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release no_gil;
    drain();
  } else {
    drain();
  }
}

}  // namespace pycomm
