// FrontEnd's own state and the steps every collective shares: the routing
// table's query, launching a job (in the caller's thread or the queue), the
// fallback, and the backend's life (shutdown, abort, errors). The collectives
// are in frontend_all_reduce.cpp, frontend_collectives.cpp and frontend_p2p.cpp.
#include "frontend.h"

#include <c10/util/Exception.h>

#include "../core/settings_check.h"
#include "dtype_map.h"
#include "queued_work.h"

namespace pycomm {

FrontEnd::FrontEnd(int rank, int size, std::shared_ptr<Communicator> comm,
                 std::shared_ptr<const Plan> plan, c10::intrusive_ptr<c10d::Backend> fallback)
    : c10d::Backend(rank, size),
      comm_(std::move(comm)),
      plan_(std::move(plan)),
      fallback_(std::move(fallback)) {}

FrontEnd::~FrontEnd() = default;

core::RouteQuery FrontEnd::query(core::Collective c, const CallWhere& w, const Reduction& red,
                                core::Algorithm requested) const {
  core::RouteQuery q = plan_->route_query();
  q.collective = c;
  q.requested = requested;
  q.cuda = w.cuda;
  q.sparse = w.sparse;
  q.native_op = red.native;
  q.dtype = core_dtype(w.dtype);
  q.op = red.op;
  q.contiguous = w.contiguous;
  return q;
}

core::PlanKind FrontEnd::plan_of(core::Collective c, const CallWhere& w) const {
  return core::route(query(c, w, Reduction())).plan;
}

core::Route FrontEnd::route_of(core::RouteQuery q, const at::Tensor& sized, int64_t times) {
  if (sized.defined()) {
    // In the plan's elements: a complex element is two reals.
    q.count = size_t(sized.numel() * times) * (sized.is_complex() ? 2 : 1);
    q.bytes = size_t(sized.numel() * times) * size_t(sized.element_size());
  }
  return core::route(q);
}

std::vector<core::Algorithm> FrontEnd::algorithms_of(const core::RouteQuery& q, const core::Route& first,
                                                     const std::vector<at::Tensor>& sized) {
  std::vector<core::Algorithm> out;
  out.reserve(sized.size());
  for (size_t i = 0; i < sized.size(); ++i) {
    out.push_back(i == 0 ? first.algorithm : route_of(q, sized[i]).algorithm);
  }
  return out;
}

void FrontEnd::shutdown() {
  // What was queued still runs: the peers run their side of it too.
  comm_->flush();
  comm_->close();
}

c10d::ErrorType FrontEnd::getError() {
  return comm_->broken() ? c10d::ErrorType::COMM_ERROR : c10d::ErrorType::SUCCESS;
}

void FrontEnd::setTimeout(std::chrono::milliseconds timeout) {
  // This rank's waits from the next call on (torchft sets it on every quorum,
  // on every rank); the bounds are PYCOMM_TIMEOUT's.
  const double seconds = double(timeout.count()) / 1e3;
  core::check_setting("timeout_s", seconds, "setTimeout");
  comm_->session().set_timeout(seconds);
  if (fallback_) fallback_->setTimeout(timeout);
}

void FrontEnd::abort() { comm_->abort("rank " + std::to_string(getRank()) + " aborted the process group"); }

c10::intrusive_ptr<c10d::Work> FrontEnd::launch(c10d::OpType type, Job job, bool async_op, bool blocking) {
  job.what = job_name(type);
  if (!async_op && comm_->run_if_idle(job.body, job.what, bytes_of(job.outputs))) {
    if (blocking) return {};
    return finished(type, std::move(job));
  }
  job.blocking = blocking;
  std::shared_ptr<WorkItem> item = comm_->enqueue(std::move(job));
  if (blocking) {
    item->wait();
    return {};
  }
  return c10::make_intrusive<QueuedWork>(getRank(), type, std::move(item), comm_);
}

c10::intrusive_ptr<c10d::Work> FrontEnd::finished(c10d::OpType type, Job job) const {
  auto item = std::make_shared<WorkItem>(std::move(job));
  item->finish(nullptr);
  return c10::make_intrusive<QueuedWork>(getRank(), type, std::move(item));
}

c10d::Backend& FrontEnd::fallback() {
  comm_->flush();
  return *fallback_;
}

// The fallback's alone.
void FrontEnd::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  const core::PartTimer timed = enter();
  fallback().monitoredBarrier(opts, wait_all_ranks);
}

}  // namespace pycomm
