// pycomm's CPU symmetric memory: the allocator torch asks for CPU tensors, and
// the handle a rendezvous returns (symmetric_memory.h says what each does).
#include "symmetric_memory.h"

#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "../core/errors.h"
#include "../core/transport/segment_exchange.h"
#include "../core/transport/session.h"
#include "../core/transport/wait_primitives.h"
#include "communicator.h"
#include "frontend.h"
#include "torch_compat.h"

namespace pycomm {

namespace cs = c10d::symmetric_memory;

namespace {

std::function<std::shared_ptr<void>()> blocking_scope;  // set_blocking_scope's
std::shared_ptr<void> enter_blocking_scope() { return blocking_scope ? blocking_scope() : nullptr; }

// Handles alive in this process: the backend's all-reduce asks symmetric_place
// only while there is one.
std::atomic<int> live_handles{0};

}  // namespace

void set_blocking_scope(std::function<std::shared_ptr<void>()> enter) { blocking_scope = std::move(enter); }

CpuSymmetricMemory::CpuSymmetricMemory(std::vector<std::shared_ptr<core::ShmSegment>> segments,
                                       size_t buffer_bytes, size_t pad_offset, size_t pad_bytes,
                                       int rank, uint64_t number,
                                       const std::shared_ptr<Communicator>& comm)
    : segments_(std::move(segments)),
      buffer_bytes_(buffer_bytes),
      pad_bytes_(pad_bytes),
      rank_(rank),
      number_(number),
      comm_(comm),
      session_(&comm->session()) {
  for (const auto& s : segments_) {
    buffers_.push_back(s->data());
    pads_.push_back(static_cast<char*>(s->data()) + pad_offset);
  }
  live_handles.fetch_add(1, std::memory_order_relaxed);
}

CpuSymmetricMemory::~CpuSymmetricMemory() { live_handles.fetch_sub(1, std::memory_order_relaxed); }

bool CpuSymmetricMemory::on_session(const core::Session& s) const {
  return session_ == &s && !comm_.expired();
}

// torch's get_signal_pad sizes its view, and checks its bounds, by the
// signal_pad_size of the moment of the call (torch keeps it in a global with
// no hook, so pycomm cannot see it change), not by this buffer's pad: raised
// after the allocation, it would hand out a view past the pad's end. torch
// asks for these pointers before it makes that view, and a kernel given them
// sizes the pad the same way, so they are refused while the size exceeds this
// pad. A smaller size only shortens the views; pycomm's own signals index by
// pad_bytes_ and need no check.
std::vector<void*>& CpuSymmetricMemory::checked_pads() {
  const size_t now = cs::get_signal_pad_size();
  TORCH_CHECK_VALUE(now <= pad_bytes_, "symmetric memory signal pad: signal_pad_size is ", now,
                    " bytes (set_signal_pad_size), but this buffer's signal pad was allocated with ",
                    pad_bytes_, ": a view or kernel sized by it would reach past the pad (set the "
                    "size before allocating, as torch asks, or set it back to ", pad_bytes_, ")");
  return pads_;
}

std::vector<void*> CpuSymmetricMemory::get_signal_pad_ptrs() { return checked_pads(); }

void** CpuSymmetricMemory::get_signal_pad_ptrs_dev() { return checked_pads().data(); }

uint32_t* CpuSymmetricMemory::slot(int pad_rank, int channel, int from, const char* what) {
  const int world = get_world_size();
  const int peer = pad_rank == rank_ ? from : pad_rank;
  TORCH_CHECK_VALUE(peer >= 0 && peer < world, "symmetric memory ", what, ": rank ", peer,
                    " is not in the group (its world size is ", world, ")");
  const size_t channels = pad_bytes_ / sizeof(uint32_t) / size_t(world);
  TORCH_CHECK_VALUE(channel >= 0 && size_t(channel) < channels, "symmetric memory ", what,
                    ": channel: ", channel, " is not in [0, ", channels, ") (the signal pad's ",
                    pad_bytes_, " bytes for ", world, " ranks)");
  return reinterpret_cast<uint32_t*>(pads_[pad_rank]) + size_t(channel) * world + from;
}

void CpuSymmetricMemory::await_swap(uint32_t* word, uint32_t from, uint32_t to, int peer,
                                    int channel, const char* what, size_t timeout_ms) {
  std::atomic_ref<uint32_t> a(*word);
  uint32_t expected = from;
  if (a.compare_exchange_strong(expected, to, std::memory_order_acq_rel)) return;
  const std::shared_ptr<Communicator> comm = comm_.lock();
  if (!comm) {
    throw core::CommError("rank " + std::to_string(rank_) + ": symmetric memory " + what +
                          ": the group of this buffer was destroyed");
  }
  core::Session& session = comm->session();
  const core::WaitPolicy& policy = session.policy();
  const double timeout_s = timeout_ms > 0 ? double(timeout_ms) / 1e3 : policy.timeout_s;
  const uint64_t start = core::monotonic_ns();
  const uint64_t spin_until = start + uint64_t(policy.spin_us * 1e3);
  const uint64_t yield_until = spin_until + uint64_t(policy.yield_us * 1e3);
  const uint64_t deadline = start + uint64_t(timeout_s * 1e9);
  const std::shared_ptr<void> blocking = enter_blocking_scope();
  const std::string where = "rank " + std::to_string(rank_) + ": symmetric memory " + what +
                            " (channel " + std::to_string(channel) + ", rank " +
                            std::to_string(peer) + ")";
  for (uint64_t checked = start;;) {
    expected = from;
    if (a.compare_exchange_weak(expected, to, std::memory_order_acq_rel)) return;
    const uint64_t now = core::monotonic_ns();
    if (now < spin_until) {
      core::cpu_relax();
      continue;
    }
    if (now - checked > 1'000'000) {  // liveness, once a millisecond
      checked = now;
      if (session.aborted()) throw core::CommError(session.aborted_message("symmetric memory " + std::string(what)));
      const int dead = session.first_dead_peer();
      if (dead >= 0) {
        throw core::PeerDied(where + ": rank " + std::to_string(dead) + " (pid " +
                             std::to_string(session.pid_of(dead)) + ") exited");
      }
      if (now >= deadline) {
        throw core::CommTimeout(c10::str(where, ": timed out after ", timeout_s, " s"));
      }
    }
    if (now < yield_until) {
      std::this_thread::yield();
    } else {
      usleep(50);
    }
  }
}

void CpuSymmetricMemory::put_signal(int dst_rank, int channel, size_t timeout_ms) {
  uint32_t* s = slot(dst_rank, channel, rank_, "put_signal");
  await_swap(s, 0, 1, dst_rank, channel, "put_signal", timeout_ms);
}

void CpuSymmetricMemory::wait_signal(int src_rank, int channel, size_t timeout_ms) {
  uint32_t* s = slot(rank_, channel, src_rank, "wait_signal");
  await_swap(s, 1, 0, src_rank, channel, "wait_signal", timeout_ms);
}

void CpuSymmetricMemory::barrier(int channel, size_t timeout_ms) {
  const int world = get_world_size();
  for (int p = 0; p < world; ++p) {
    if (p != rank_) put_signal(p, channel, timeout_ms);
  }
  for (int p = 0; p < world; ++p) {
    if (p != rank_) wait_signal(p, channel, timeout_ms);
  }
}

namespace {

// Where an allocation's parts lie in its segment. The pad's size is the
// signal_pad_size of the moment of allocation, which each process sets for
// itself: ranks may disagree on it even where their segments' totals agree.
struct Layout {
  size_t buffer_bytes;
  size_t pad_offset;
  size_t pad_bytes;
  bool operator==(const Layout&) const = default;
};

std::string describe(const Layout& l) {
  return c10::str("a ", l.buffer_bytes, "-byte buffer and a ", l.pad_bytes,
                  "-byte signal pad at offset ", l.pad_offset);
}

// One allocation: its segment ([buffer | signal pad]) and its rendezvous so far.
struct Block {
  std::shared_ptr<core::ShmSegment> segment;
  Layout layout;
  std::map<std::string, c10::intrusive_ptr<CpuSymmetricMemory>> handles;  // by group name
};

// A group's pycomm front-end, when pycomm runs the whole group (one host).
struct PycommGroup {
  c10::intrusive_ptr<c10d::Backend> backend;
  std::shared_ptr<Communicator> comm;
};

PycommGroup pycomm_group(const std::string& group_name, const char* op) {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  try {
    group = c10d::resolve_process_group(group_name);
  } catch (const c10::Error&) {
    C10_THROW_ERROR(ValueError, c10::str(op, ": group_name: no process group is registered as '",
                                         group_name, "' (pass a live group or its group_name)"));
  }
  c10::intrusive_ptr<c10d::Backend> backend;
  try {
    backend = group->getBackend(c10::DeviceType::CPU);
  } catch (const c10::Error&) {
  }
  auto* front = dynamic_cast<FrontEnd*>(backend.get());
  TORCH_CHECK_VALUE(front != nullptr, op, ": group '", group_name,
                    "': CPU symmetric memory needs a group whose CPU backend is pycomm (",
                    backend ? backend->getBackendName() : std::string("none"), " is not)");
  const std::shared_ptr<Communicator>& comm = front->communicator();
  TORCH_CHECK_VALUE(comm && comm->world() == group->getSize(), op, ": group '", group_name,
                    "' spans more than one host: symmetric memory is shared memory, on one host");
  TORCH_CHECK_VALUE(std::string(comm->transport()) == "memfd", op, ": group '", group_name,
                    "' took the posix shared-memory transport; symmetric memory is handed over as "
                    "memfds (PYCOMM_SHM_TRANSPORT=auto or memfd, on a host that has them)");
  return {backend, comm};
}

class CpuAllocator : public cs::SymmetricMemoryAllocator {
 public:
  void* alloc(size_t size, int /*device_idx*/, const std::optional<std::string>& /*group_name*/) override {
    const size_t pad_offset = (std::max<size_t>(size, 1) + 63) / 64 * 64;
    const size_t pad_bytes = cs::get_signal_pad_size();
    auto block = std::make_unique<Block>();
    try {
      block->segment = std::make_shared<core::ShmSegment>(core::ShmSegment::create_anonymous(
          "symm-" + std::to_string(getpid()), pad_offset + pad_bytes));
    } catch (const core::CommError& e) {
      TORCH_CHECK(false, "symmetric memory: allocating ", size, " bytes: ", e.what());
    }
    block->layout = Layout{size, pad_offset, pad_bytes};
    void* ptr = block->segment->data();
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.emplace(ptr, std::move(block));
    return ptr;
  }

  void free(void* ptr) override {
    std::unique_ptr<Block> gone;  // unmapped outside the lock
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return;
    gone = std::move(it->second);
    blocks_.erase(it);
  }

  size_t get_alloc_size(void* ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(ptr);
    TORCH_CHECK_VALUE(it != blocks_.end(), "symmetric memory: this tensor's storage was not "
                                           "allocated by symm_mem.empty");
    return it->second->layout.buffer_bytes;
  }

  c10::intrusive_ptr<cs::SymmetricMemory> rendezvous(void* ptr,
                                                     const std::optional<std::string>& group_name) override {
    TORCH_CHECK_VALUE(group_name.has_value(), "symm_mem.rendezvous: group: pass the group (pycomm "
                                              "keeps no default group for CPU symmetric memory)");
    return handle(ptr, *group_name, "symm_mem.rendezvous");
  }

  bool has_multicast_support(int /*device_idx*/) override { return false; }
  c10::DeviceType supported_device_type() override { return c10::DeviceType::CPU; }
  std::string name() override { return "pycomm"; }
#if PYCOMM_TORCH_AT_LEAST(2, 13)  // torch_compat.h
  bool has_allocation(void* ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    return blocks_.count(ptr) > 0;
  }
#endif

  // symmetric_place's answer.
  bool place_of(const at::Tensor& t, const core::Session& session, SymmetricPlace* out) {
    char* base = static_cast<char*>(t.storage().data_ptr().get());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(base);
    if (it == blocks_.end()) return false;
    const size_t offset = size_t(static_cast<char*>(t.data_ptr()) - base);
    if (offset + t.nbytes() > it->second->layout.buffer_bytes) return false;
    for (const auto& [name, handle] : it->second->handles) {
      if (!handle->on_session(session)) continue;
      out->peers.clear();
      for (int r = 0; r < handle->get_world_size(); ++r) out->peers.push_back(handle->buffer(r) + offset);
      out->place = (handle->number() << 40) | offset;
      return true;
    }
    return false;
  }

  c10::intrusive_ptr<CpuSymmetricMemory> handle(void* ptr, const std::string& group_name, const char* op) {
    std::shared_ptr<core::ShmSegment> own;
    Layout layout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = blocks_.find(ptr);
      TORCH_CHECK_VALUE(it != blocks_.end(), op, ": the tensor is not symmetric memory: allocate "
                                             "it with symm_mem.empty(..., device='cpu')");
      Block& b = *it->second;
      auto h = b.handles.find(group_name);
      if (h != b.handles.end()) return h->second;
      own = b.segment;
      layout = b.layout;
    }
    // The exchange runs unlocked: it waits for the peers, within the group's timeout.
    std::lock_guard<std::mutex> one_at_a_time(rendezvous_mu_);
    c10::intrusive_ptr<CpuSymmetricMemory> made =
        exchange(pycomm_group(group_name, op), own, layout);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(ptr);
    if (it != blocks_.end()) it->second->handles.emplace(group_name, made);
    return made;
  }

 private:
  // Every rank offers its segment under the group's next symmetric key,
  // gathers every rank's layout (which waits for all offers, as a barrier of
  // the group would), maps every peer's segment, and withdraws its offer once
  // all have mapped (a barrier). A peer's pad is found at this rank's
  // pad_offset and its signals are indexed by this rank's pad_bytes, so ranks
  // whose layouts differ in any part (equal totals included) would signal
  // into each other's data: every rank sees the same gathered layouts and
  // fails alike, before anything of a peer is mapped.
  c10::intrusive_ptr<CpuSymmetricMemory> exchange(const PycommGroup& group,
                                                  const std::shared_ptr<core::ShmSegment>& own,
                                                  const Layout& layout) {
    const std::shared_ptr<void> blocking = enter_blocking_scope();
    core::Session& session = group.comm->session();
    const int rank = group.comm->rank();
    const int world = group.comm->world();
    std::erase_if(rendezvous_count_, [](const auto& kv) { return kv.first.expired(); });
    const uint64_t number = ++rendezvous_count_[group.comm];
    const uint64_t key = core::symmetric_key(number);
    session.offer_segment(key, own->fd());
    std::vector<std::shared_ptr<core::ShmSegment>> segments(world);
    try {
      const std::vector<Layout> layouts = gather_layouts(group, layout);
      for (int r = 0; r < world; ++r) {
        TORCH_CHECK_VALUE(layouts[r] == layout, "symm_mem.rendezvous: rank ", r, " allocated ",
                          describe(layouts[r]), "; rank ", rank, " ", describe(layout),
                          " (every rank allocates the same size, in the same order, under the "
                          "same set_signal_pad_size)");
      }
      for (int r = 0; r < world; ++r) {
        segments[r] = r == rank ? own : std::make_shared<core::ShmSegment>(session.fetch_segment(r, key));
      }
      group.backend->barrier(c10d::BarrierOptions())->wait();
    } catch (...) {
      session.withdraw_segment(key);
      throw;
    }
    session.withdraw_segment(key);
    // The views reach as far as the layout says; what bounds them is the
    // memfd's own (sealed) size, whatever its owner announced.
    for (int r = 0; r < world; ++r) {
      TORCH_CHECK_VALUE(segments[r]->size() == own->size(), "symm_mem.rendezvous: rank ", r,
                        " offered a segment of ", segments[r]->size(), " bytes, where ",
                        describe(layout), " take ", own->size());
    }
    return c10::make_intrusive<CpuSymmetricMemory>(std::move(segments), layout.buffer_bytes,
                                                   layout.pad_offset, layout.pad_bytes, rank, number,
                                                   group.comm);
  }

  // Every rank's layout, in rank order, through the group's all-gather.
  static std::vector<Layout> gather_layouts(const PycommGroup& group, const Layout& layout) {
    at::Tensor mine = at::tensor({int64_t(layout.buffer_bytes), int64_t(layout.pad_offset),
                                  int64_t(layout.pad_bytes)}, at::kLong);
    at::Tensor all = at::empty({group.comm->world(), 3}, at::kLong);
    group.backend->_allgather_base(all, mine)->wait();
    std::vector<Layout> layouts;
    for (int r = 0; r < group.comm->world(); ++r) {
      const int64_t* l = all[r].data_ptr<int64_t>();
      layouts.push_back(Layout{size_t(l[0]), size_t(l[1]), size_t(l[2])});
    }
    return layouts;
  }

  std::mutex mu_;
  std::unordered_map<void*, std::unique_ptr<Block>> blocks_;  // by buffer pointer
  std::mutex rendezvous_mu_;
  // Rendezvous made on each live communicator so far (the last one's number).
  // Every rank counts alike, as rendezvous is collective; keys need only agree
  // and be unique on one session's server.
  std::map<std::weak_ptr<Communicator>, uint64_t, std::owner_less<>> rendezvous_count_;
};

c10::intrusive_ptr<CpuAllocator>& allocator() {
  static c10::intrusive_ptr<CpuAllocator> a = c10::make_intrusive<CpuAllocator>();
  return a;
}

}  // namespace

c10::intrusive_ptr<CpuSymmetricMemory> cpu_symmetric_memory(const at::Tensor& tensor,
                                                            const std::string& group_name,
                                                            const char* op) {
  TORCH_CHECK_VALUE(tensor.device().is_cpu(), op, ": the tensor is on ", tensor.device(),
                    "; pycomm serves symmetric memory for CPU tensors");
  return allocator()->handle(tensor.storage().data_ptr().get(), group_name, op);
}

bool symmetric_place(const at::Tensor& t, const core::Session& session, SymmetricPlace* out) {
  if (live_handles.load(std::memory_order_relaxed) == 0 || !t.is_cpu() || !t.is_contiguous()) return false;
  return allocator()->place_of(t, session, out);
}

void register_symmetric_memory() {
  cs::register_availability("pycomm", allocator());
  cs::register_allocator(c10::DeviceType::CPU, allocator());
}

}  // namespace pycomm
