// pycomm._C: the Python binding. The one layer that knows about Python: it
// translates errors, releases the GIL around blocking calls, and hands
// pycomm.all_reduce's arguments to the c10d front-end's all-reduce entry
// (frontend.h), the one dist.all_reduce takes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <cstring>

#include "../core/call_profile.h"
#include "../core/errors.h"
#include "../core/kernels/reduce_kernels.h"
#include "../core/transport/cross_memory.h"
#include "../core/transport/shm_segment.h"
#include "../core/tuning.h"
#include "../cuda/all_reduce_args.h"
#include "communicator.h"
#include "frontend.h"
#include "hierarchical_plan.h"
#include "host_plan.h"
#include "null_backend.h"
#include "symmetric_memory.h"
#include "tables_bindings.h"

namespace py = pybind11;

namespace pycomm {
namespace {

// "pycomm.CommTimeout: rank 2: ..." -> "rank 2: ...".
const char* without_class_name(const char* what) {
  if (std::strncmp(what, "pycomm.", 7) != 0) return what;
  const char* colon = std::strstr(what, ": ");
  return colon ? colon + 2 : what;
}

// The communicator's destructor joins its worker, and the worker may need the
// GIL to drop the last reference to a tensor: never destroy it holding the GIL.
struct ReleaseGilAndDelete {
  void operator()(Communicator* c) const {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      delete c;
    } else {
      delete c;
    }
  }
};

// The front-end behind a backend that make_backend or
// make_hierarchical_backend made.
FrontEnd& frontend_of(const c10::intrusive_ptr<c10d::Backend>& backend) {
  auto* b = dynamic_cast<FrontEnd*>(backend.get());
  TORCH_CHECK_TYPE(b != nullptr, "backend: expected pycomm's backend (make_backend), got ",
                   backend ? backend->getBackendName() : std::string("None"));
  return *b;
}

// pycomm.all_reduce: the front-end's all-reduce entry with its call
// (all_reduce_call.h: the op and algorithm by name, restore_on_failure).
// Returns None (async_op=False), else the c10d Work (wait, is_completed,
// get_future: a Future of [tensor], as torch's own Work gives).
// python_future (ring_hook's): returns the Future itself, holding the tensor
// as a Python object, which DDP's Python hook interface requires of a hook's
// future; it is made under the GIL on the thread that completes the work, so
// the hook needs no Python callback to convert it.
py::object all_reduce(const c10::intrusive_ptr<c10d::Backend>& backend, const at::Tensor& tensor,
                      const std::string& op, bool async_op, const std::string& algorithm,
                      std::optional<bool> restore_on_failure, bool python_future) {
  FrontEnd& frontend = frontend_of(backend);
  AllReduceCall call;
  call.reduction = Reduction::named(op);
  call.requested = all_reduce_algorithm_named(algorithm);
  call.restore = restore_on_failure;
  call.async_op = async_op || python_future;
  call.blocking = !call.async_op;
  std::vector<at::Tensor> tensors{tensor};
  c10::intrusive_ptr<c10d::Work> work;
  {
    py::gil_scoped_release no_gil;
    work = frontend.all_reduce_call(tensors, std::move(call));
  }
  if (!work) return py::none();
  if (!python_future) return py::cast(work);
  c10::intrusive_ptr<c10::ivalue::Future> held = work->getFuture()->then(
      [tensor](c10::ivalue::Future& done) {
        // An error passes on as it is (then() sets it on the child future).
        if (done.hasError()) std::rethrow_exception(done.exception_ptr());
        py::gil_scoped_acquire gil;
        return torch::jit::toIValue(py::cast(tensor), c10::PyObjectType::get());
      },
      c10::PyObjectType::get());
  return py::cast(std::make_shared<torch::jit::PythonFutureWrapper>(std::move(held)));
}

bool cuda_built() {
#ifdef PYCOMM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace
}  // namespace pycomm

PYBIND11_MODULE(_C, m) {
  using namespace pycomm;
  m.doc() = "pycomm native core: shared-memory communicator and torch.distributed backend";
  // symm_mem.empty(..., device="cpu") and rendezvous on pycomm's shared memory;
  // their waits let go of the GIL, which torch's bindings of them keep.
  register_symmetric_memory();
  set_blocking_scope([]() -> std::shared_ptr<void> {
    if (!Py_IsInitialized() || !PyGILState_Check()) return nullptr;
    return std::shared_ptr<void>(PyEval_SaveThread(),
                                 [](void* state) { PyEval_RestoreThread(static_cast<PyThreadState*>(state)); });
  });

  // The exception classes live as long as the process (never decref'd), so
  // the translator below can use them during interpreter shutdown too.
  static PyObject* comm_error =
      PyErr_NewException("pycomm._C.CommError", PyExc_RuntimeError, nullptr);
  static PyObject* comm_timeout =
      PyErr_NewException("pycomm._C.CommTimeout", comm_error, nullptr);
  static PyObject* mismatch =
      PyErr_NewException("pycomm._C.CollectiveMismatch", comm_error, nullptr);
  // Under CommTimeout (so `except CommTimeout` written before it still
  // catches a dead peer), and so under CommError.
  static PyObject* peer_died =
      PyErr_NewException("pycomm._C.PeerDied", comm_timeout, nullptr);
  m.attr("CommError") = py::handle(comm_error);
  m.attr("CommTimeout") = py::handle(comm_timeout);
  m.attr("PeerDied") = py::handle(peer_died);
  m.attr("CollectiveMismatch") = py::handle(mismatch);
  // Registered after torch's, so tried first: pycomm's errors keep their
  // types through torch.distributed's Work.wait() too. A typed exception drops
  // the "pycomm.CommTimeout: " its text begins with (errors.h): Python prints
  // the class's name in front of the message already.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const core::CollectiveMismatch& e) {
      PyErr_SetString(mismatch, without_class_name(e.what()));
    } catch (const core::PeerDied& e) {
      PyErr_SetString(peer_died, without_class_name(e.what()));
    } catch (const core::CommTimeout& e) {
      PyErr_SetString(comm_timeout, without_class_name(e.what()));
    } catch (const core::CommError& e) {
      PyErr_SetString(comm_error, without_class_name(e.what()));
    } catch (const core::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const c10::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
    } catch (const c10::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
    }
  });

  py::class_<Communicator, std::shared_ptr<Communicator>>(m, "Communicator")
      .def(py::init([](int rank, int world, const std::string& place, bool create, const py::dict& config,
                       const std::string& token, const std::vector<std::string>& members) {
             core::CommConfig c = config_from(config);
             core::SegmentPlace where = core::SegmentPlace::parse(place);
             if (!token.empty()) where.token = core::secret_from_hex(token);
             for (const std::string& d : members) {
               // Rank 0's own entry is unused: it may be empty.
               where.members.push_back(d.empty() ? core::Sha256Digest{} : core::digest_from_hex(d));
             }
             py::gil_scoped_release no_gil;
             return std::shared_ptr<Communicator>(new Communicator(rank, world, where, create, c),
                                                  ReleaseGilAndDelete{});
           }),
           py::arg("rank"), py::arg("world"), py::arg("place"), py::arg("create"), py::arg("config"),
           py::kw_only(), py::arg("token") = "", py::arg("members") = std::vector<std::string>{},
           "place: 'posix:<name>' or 'memfd:<server id>'. memfd: an attaching rank shows `token` (hex) "
           "to rank 0's server; the creating rank admits the ranks whose tokens have the SHA-256 "
           "digests `members` (hex, in rank order; rank 0's may be empty).")
      // Waits for the peers (the single-copy probe): without the GIL, so ranks that are
      // threads of one process (torchft's tests run replicas so) reach it side by side.
      .def("start", &Communicator::start, py::call_guard<py::gil_scoped_release>())
      .def("unlink_name", &Communicator::unlink_name)
      .def("close", &Communicator::close, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("world_size", &Communicator::world)
      .def_property_readonly("transport", &Communicator::transport)
      .def_property_readonly("channel_bytes", &Communicator::channel_bytes)
      .def_property_readonly(
          "numa_placement",
          [](const Communicator& c) {
            const core::NumaPlacement& p = c.numa_placement();
            py::dict d;
            d["node"] = p.node;
            d["pages"] = p.pages;
            d["on_node"] = p.on_node;
            d["why_not"] = p.why_not ? py::object(py::str(p.why_not)) : py::object(py::none());
            return d;
          },
          "Where this rank's slots and incoming ring link were placed at set-up: its NUMA node, "
          "the pages asked to move there and those that did (why_not: why none was placed).")
      .def_property("numa_nodes", &Communicator::numa_nodes, &Communicator::set_numa_nodes,
                    "Each rank's NUMA node as its CPU affinity has it (-1: not pinned to one node), "
                    "agreed at set-up; ranks pinned to different nodes run large all-reduces "
                    "two_level.")
      .def_property_readonly("single_copy", &Communicator::single_copy,
                             "Whether the group copies large messages once, straight out of a peer's memory "
                             "(cross-memory attach), as every rank agreed at set-up.")
      .def_property_readonly("single_copy_reason", &Communicator::single_copy_reason,
                             "Why the group takes the single copy, or why not.")
      .def_property_readonly("config", [](const Communicator& c) { return config_dict(c.config()); })
      .def_property_readonly("timeout_s", [](Communicator& c) { return c.session().timeout_s(); },
                             "This rank's timeout now: the one set up with, or setTimeout's since.")
      .def(
          "raise_if_broken",
          [](Communicator& c) {
            if (c.broken()) std::rethrow_exception(c.session().aborted_error("the process group"));
          },
          "Raises what the group's calls raise once its session is broken (a dead or stalled "
          "peer, an abort: PeerDied, CommTimeout), naming why; returns None while it is whole.");

  m.def("make_backend",
        [](std::shared_ptr<Communicator> comm, std::optional<c10::intrusive_ptr<c10d::Backend>> fallback) {
          const int rank = comm->rank(), world = comm->world();
          auto plan = std::make_unique<HostPlan>(world, comm->config(), comm->numa_nodes(), comm->single_copy());
          return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<FrontEnd>(
              rank, world, std::move(comm), std::move(plan),
              fallback ? std::move(*fallback) : c10::intrusive_ptr<c10d::Backend>()));
        },
        py::arg("communicator"), py::arg("fallback"),
        "The c10d backend over `communicator`, forwarding what it does not run to `fallback` "
        "(None: refusing it, as pycomm's own API on one host does).");
  m.def("make_hierarchical_backend",
        [](std::shared_ptr<Communicator> comm, c10::intrusive_ptr<c10d::Backend> inter,
           c10::intrusive_ptr<c10d::Backend> fallback, int rank, std::vector<std::vector<int>> hosts) {
          HostLayout layout(rank, std::move(hosts));
          TORCH_CHECK_VALUE(comm->world() == layout.local_size() && comm->rank() == layout.local_rank,
                            "communicator: rank ", comm->rank(), " of ", comm->world(), ", expected ",
                            layout.local_rank, " of ", layout.local_size(), " (this host's ranks)");
          const int world = layout.world();
          auto plan = std::make_unique<HierarchicalPlan>(std::move(layout), std::move(inter), fallback,
                                                         comm->config());
          return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<FrontEnd>(
              rank, world, std::move(comm), std::move(plan), std::move(fallback)));
        },
        py::arg("communicator"), py::arg("inter"), py::arg("fallback"), py::arg("rank"),
        py::arg("hosts"),
        "The c10d backend of a group that spans hosts: `communicator` over this host's ranks, "
        "`inter` over the ranks with this rank's local index on every host, `fallback` over all; "
        "its thresholds are the communicator's settings (hier_*).");
  m.def("make_null_backend", &make_null_backend, py::arg("rank"), py::arg("size"),
        "A c10d backend that completes every call at once and moves nothing: torch's own "
        "per-call cost, for the benches (null_backend.h). Never a real group's backend.");
  m.def("all_reduce", &all_reduce, py::arg("backend"), py::arg("tensor"), py::arg("op"),
        py::arg("async_op"), py::arg("algorithm"), py::arg("restore_on_failure") = py::none(),
        py::arg("python_future") = false,
        "pycomm.all_reduce through `backend`'s front-end (make_backend, make_hierarchical_backend).");
  m.def("communicator_of",
        [](const c10::intrusive_ptr<c10d::Backend>& backend) { return frontend_of(backend).communicator(); },
        py::arg("backend"),
        "The communicator under `backend` (make_backend's, or a pycomm group's: "
        "group._get_backend(torch.device('cpu'))): its transport, single copy, placement.");
  m.def("barrier",
        [](const c10::intrusive_ptr<c10d::Backend>& backend) {
          FrontEnd& frontend = frontend_of(backend);
          py::gil_scoped_release no_gil;
          c10d::BarrierOptions opts;
          opts.asyncOp = false;  // runs in this thread when the communicator is idle
          frontend.barrier(opts)->wait();
        },
        py::arg("backend"), "pycomm.barrier through `backend`'s front-end.");
  m.def("check_all_reduce_names",
        [](const std::string& op, const std::string& algorithm) {
          Reduction::named(op);
          all_reduce_algorithm_named(algorithm);
        },
        py::arg("op"), py::arg("algorithm"),
        "ValueError unless pycomm.all_reduce takes `op` and `algorithm`.");
  m.def("profile_set", &core::CallProfile::set, py::arg("on"),
        "Turns the call profile on or off (pycomm.tools.profile); either way its sums start at zero.");
  m.def("profile_take",
        [] {
          const core::CallProfileSums sums = core::CallProfile::take();
          py::dict out;
          for (int i = 0; i < core::kCallParts; ++i) {
            out[core::call_part_name(core::CallPart(i))] = py::make_tuple(sums.ns[i], sums.count[i]);
          }
          return out;
        },
        "{part: (nanoseconds, times entered)} since the profile was set or last taken; the sums "
        "start again at zero (core/call_profile.h names the parts).");
  m.def("trace_set", &JobTrace::set, py::arg("on"),
        "Turns the job trace on or off (pycomm.tools.trace); either way it starts empty.");
  m.def("trace_take",
        [] {
          uint64_t dropped = 0;
          std::vector<JobTimes> records = JobTrace::take(&dropped);
          py::list out;
          for (const JobTimes& t : records) {
            out.append(py::make_tuple(t.what, t.bytes, t.queued, t.queued_ns, t.started_ns,
                                      t.ended_ns, t.completed_ns));
          }
          return py::make_tuple(out, dropped);
        },
        "(records, dropped): each record (what, bytes, queued, queued_ns, started_ns, ended_ns, "
        "completed_ns) on CLOCK_MONOTONIC; the trace is emptied.");
  m.def("new_segment_name", &core::new_segment_name, py::arg("tag") = "");
  m.def("new_group_id", &core::new_group_id, "A fresh id for a group's segment servers.");
  m.def("new_group_secret", [] { return core::secret_to_hex(core::new_group_secret()); },
        "32 random bytes, in hex: a rank's token (what proves it is the rank that published its digest).");
  m.def("token_digest", [](const std::string& token) {
        return core::secret_to_hex(core::token_digest(core::secret_from_hex(token)));
      }, py::arg("token"), "The SHA-256 digest of a token (hex in, hex out): what a rank publishes of it.");
  m.def(
      "shared_memory_cost",
      [](int world, const py::dict& config) {
        const SharedMemoryCost cost = shared_memory_cost(world, config_from(config));
        return py::dict(py::arg("session_bytes") = cost.session_bytes,
                        py::arg("channel_bytes") = cost.channel_bytes);
      },
      py::arg("world"), py::arg("config"),
      "What a group of `world` ranks maps: its session segment, and each point-to-point "
      "channel (made when a pair first talks).");
  m.def("memfd_unavailable_reason", &core::memfd_unavailable_reason,
        "Why this host cannot take the memfd transport, or '' when it can.");
  m.def("single_copy_unavailable_reason", &core::single_copy_unavailable_reason,
        "Why two processes of this user here cannot read each other's memory (cross-memory "
        "attach), or '' when they can: a forked child reads this process, as a group's probe would.");
  m.def("yama_ptrace_scope", &core::yama_ptrace_scope,
        "Yama's ptrace_scope, or -1 where Yama is not there.");
  m.def("remove_stale_segments", &core::remove_stale_segments,
        "Unlinks pycomm segments whose creating process no longer runs.");
  m.def("shm_dir", &core::shm_dir);
  m.def("cuda_built", &cuda_built, "Whether the CUDA sources were compiled in.");
  m.def("cpu_vector_path", &core::cpu_vector_path,
        "The vector loops the CPU kernels were compiled with.");
  // The CUDA all-reduce's launch shape, for tests/test_cuda_codegen.py to
  // check against the compiled kernels' resources (plain C++: any build).
  m.def("cuda_all_reduce_threads", [] { return int(cuda::kAllReduceThreads); },
        "Threads of a CUDA all-reduce block.");
  m.def("cuda_max_blocks_per_rank", &cuda::max_blocks_per_rank, py::arg("world"), py::arg("sm_count"),
        "The most blocks a rank's CUDA all-reduce launches, so that every rank's blocks are "
        "resident at once on a GPU of sm_count SMs.");
  bind_tables(m);
}
