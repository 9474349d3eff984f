// pycomm._C: the Python binding of the communicator and its error types.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include "../core/errors.h"
#include "../core/shm_segment.h"
#include "communicator.h"

namespace py = pybind11;

namespace pycomm {
namespace {

// What async_op=True returns: .wait() raises the original typed exception;
// .get_future() is a torch.futures.Future completed by the worker thread.
class Work {
 public:
  explicit Work(std::shared_ptr<WorkItem> item) : item_(std::move(item)) {}
  bool wait() {
    py::gil_scoped_release no_gil;
    item_->wait();
    return true;
  }
  bool is_completed() {
    std::lock_guard<std::mutex> lock(item_->mu);
    return item_->done;
  }
  std::shared_ptr<torch::jit::PythonFutureWrapper> get_future() {
    return std::make_shared<torch::jit::PythonFutureWrapper>(item_->future);
  }

 private:
  std::shared_ptr<WorkItem> item_;
};

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
  m.doc() = "pycomm native core: shared-memory communicator";

  // The exception classes live as long as the process (never decref'd), so
  // the translator below can use them during interpreter shutdown too.
  static PyObject* comm_error =
      PyErr_NewException("pycomm._C.CommError", PyExc_RuntimeError, nullptr);
  static PyObject* comm_timeout =
      PyErr_NewException("pycomm._C.CommTimeout", comm_error, nullptr);
  static PyObject* mismatch =
      PyErr_NewException("pycomm._C.CollectiveMismatch", comm_error, nullptr);
  m.attr("CommError") = py::handle(comm_error);
  m.attr("CommTimeout") = py::handle(comm_timeout);
  m.attr("CollectiveMismatch") = py::handle(mismatch);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const core::CollectiveMismatch& e) {
      PyErr_SetString(mismatch, e.what());
    } catch (const core::CommTimeout& e) {
      PyErr_SetString(comm_timeout, e.what());
    } catch (const core::CommError& e) {
      PyErr_SetString(comm_error, e.what());
    } catch (const core::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  py::class_<Work>(m, "Work")
      .def("wait", &Work::wait, "Blocks until the collective finished; raises its error.")
      .def("is_completed", &Work::is_completed)
      .def("get_future", &Work::get_future,
           "A torch.futures.Future that completes with the tensor.");

  py::class_<Communicator>(m, "Communicator")
      .def(py::init([](int rank, int world, const std::string& name, bool create, double timeout_s,
                       size_t direct_bytes, size_t ring_buffer_bytes, size_t ring_buffers,
                       size_t direct_max_bytes, double spin_us, double yield_us,
                       bool restore_on_failure) {
             CommunicatorOptions o;
             o.transport.timeout_s = timeout_s;
             o.transport.direct_bytes = direct_bytes;
             o.transport.ring_buffer_bytes = ring_buffer_bytes;
             o.transport.ring_buffers = ring_buffers;
             o.transport.spin_us = spin_us;
             o.transport.yield_us = yield_us;
             o.tuning.direct_max_bytes = direct_max_bytes;
             o.tuning.restore_on_failure = restore_on_failure;
             return new Communicator(rank, world, name, create, o);
           }),
           py::arg("rank"), py::arg("world"), py::arg("name"), py::arg("create"),
           py::arg("timeout_s"), py::arg("direct_bytes"), py::arg("ring_buffer_bytes"),
           py::arg("ring_buffers"), py::arg("direct_max_bytes"), py::arg("spin_us"),
           py::arg("yield_us"), py::arg("restore_on_failure"))
      .def("start", &Communicator::start)
      .def("unlink_name", &Communicator::unlink_name)
      .def(
          "all_reduce",
          [](Communicator& c, const at::Tensor& t, const std::string& op, bool async_op,
             const std::string& algorithm) -> py::object {
            auto item = c.all_reduce(t, op, async_op, algorithm);
            if (!item) return py::none();
            return py::cast(Work(std::move(item)));
          },
          py::arg("tensor"), py::arg("op"), py::arg("async_op"), py::arg("algorithm"))
      .def("barrier", &Communicator::barrier)
      .def("close", &Communicator::close)
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("world_size", &Communicator::world)
      .def_property_readonly("segment_name", &Communicator::name)
      .def_property_readonly("timeout_s",
                             [](const Communicator& c) { return c.options().transport.timeout_s; });

  m.def("new_segment_name", &core::new_segment_name);
  m.def("remove_stale_segments", &core::remove_stale_segments,
        "Unlinks pycomm segments whose creating process no longer runs.");
  m.def("shm_dir", &core::shm_dir);
  m.def("cuda_built", &cuda_built, "Whether the CUDA sources were compiled in.");
}
