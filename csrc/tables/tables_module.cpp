// pycomm._tables: the settings table (csrc/core/settings.h) and the routing
// table (csrc/core/routing.h) for Python, with no torch: the CPython API only,
// so the scaling model and `pycomm doctor` read the rules the backend runs
// where torch, or pycomm._C, cannot load.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstring>
#include <iterator>
#include <string>
#include <type_traits>

#include "../core/routing.h"
#include "../core/tuning.h"

namespace {

using namespace pycomm::core;

template <typename T>
PyObject* to_python(T v) {
  if constexpr (std::is_same_v<T, bool>) return PyBool_FromLong(v);
  else if constexpr (std::is_floating_point_v<T>) return PyFloat_FromDouble(v);
  else return PyLong_FromSize_t(v);
}

template <typename T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_floating_point_v<T>) return "float";
  else return "int";
}

// Steals `value`; false (with the error set) if it or the insertion failed.
bool put(PyObject* dict, const char* key, PyObject* value) {
  if (value == nullptr) return false;
  const int rc = PyDict_SetItemString(dict, key, value);
  Py_DECREF(value);
  return rc == 0;
}

PyObject* default_config(PyObject*, PyObject* args) {
  int world = 0, cores = 0;
  if (!PyArg_ParseTuple(args, "ii:default_config", &world, &cores)) return nullptr;
  const CommConfig c = pycomm::core::default_config(world, cores);
  PyObject* d = PyDict_New();
  if (d == nullptr) return nullptr;
#define PYCOMM_PUT_VALUE(name, field, env, unit, factor, value, why) \
  if (!put(d, #name, to_python(c.field))) {                         \
    Py_DECREF(d);                                                    \
    return nullptr;                                                  \
  }
  PYCOMM_SETTINGS(PYCOMM_PUT_VALUE)
#undef PYCOMM_PUT_VALUE
  return d;
}

PyObject* settings(PyObject*, PyObject*) {
  PyObject* rows = PyList_New(0);
  if (rows == nullptr) return nullptr;
  CommConfig c;
#define PYCOMM_PUT_ROW(name, field, env, unit, factor, value, why)                                  \
  {                                                                                                 \
    PyObject* row = PyDict_New();                                                                   \
    const bool ok = row != nullptr && put(row, "name", PyUnicode_FromString(#name)) &&             \
                    put(row, "field", PyUnicode_FromString(#field)) &&                              \
                    put(row, "env", PyUnicode_FromString(env)) &&                                   \
                    put(row, "unit", PyUnicode_FromString(unit)) &&                                 \
                    put(row, "factor", PyLong_FromLong(long(factor))) &&                            \
                    put(row, "type", PyUnicode_FromString(type_name<decltype(c.field)>())) &&      \
                    put(row, "why", PyUnicode_FromString(why)) && PyList_Append(rows, row) == 0;    \
    Py_XDECREF(row);                                                                                \
    if (!ok) {                                                                                      \
      Py_DECREF(rows);                                                                              \
      return nullptr;                                                                               \
    }                                                                                               \
  }
  PYCOMM_SETTINGS(PYCOMM_PUT_ROW)
#undef PYCOMM_PUT_ROW
  (void)c;
  return rows;
}

template <typename E>
bool enum_of(const char* name, int n, const char* (*name_of)(E), const char* what, E* out) {
  for (int i = 0; i < n; ++i) {
    if (std::string(name_of(E(i))) == name) {
      *out = E(i);
      return true;
    }
  }
  std::string known;
  for (int i = 0; i < n; ++i) known += std::string(i ? ", " : "") + name_of(E(i));
  PyErr_Format(PyExc_ValueError, "%s: unknown %s '%s'; expected one of %s", what, what, name,
               known.c_str());
  return false;
}

PyObject* route(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"collective", "cuda", "sparse", "native_op", "hosts", "uniform",
                                   "local_size", "count", "bytes", "direct_max_bytes",
                                   "leader_max_bytes", "dtype", "op", "contiguous", nullptr};
  const char* collective = nullptr;
  const char* dtype = "float32";
  const char* op = "sum";
  int cuda = 0, sparse = 0, native_op = 1, uniform = 1, contiguous = 1;
  RouteQuery q;
  // Signed, so that a negative size is an error here rather than a huge one.
  long long count = 0, bytes = 0, direct_max = 0, leader_max = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|$pppipiLLLLssp:route",
                                   const_cast<char**>(keywords), &collective, &cuda, &sparse,
                                   &native_op, &q.hosts, &uniform, &q.local_size, &count, &bytes,
                                   &direct_max, &leader_max, &dtype, &op, &contiguous)) {
    return nullptr;
  }
  if (!enum_of(collective, kCollectives, &collective_name, "collective", &q.collective)) return nullptr;
  // dtype: a name of the core's reducible types (any other type routes as "opaque").
  q.dtype = opaque_dtype(0, 1);
  for (DType d : kReducibleDtypes) {
    if (std::strcmp(dtype, dtype_name(d)) == 0) q.dtype = d;
  }
  if (is_opaque(q.dtype) && std::strcmp(dtype, "opaque") != 0) {
    PyErr_Format(PyExc_ValueError, "dtype: unknown dtype '%s'; expected a reducible dtype's name "
                 "or 'opaque'", dtype);
    return nullptr;
  }
  if (!enum_of(op, int(ReduceOp::kBxor),
               +[](ReduceOp o) -> const char* { return op_name(ReduceOp(uint32_t(o) + 1)); },
               "op", &q.op)) {
    return nullptr;
  }
  q.op = ReduceOp(uint32_t(q.op) + 1);  // ReduceOp counts from 1
  q.contiguous = contiguous;
  if (q.hosts < 1 || q.local_size < 1) {
    PyErr_SetString(PyExc_ValueError, "hosts, local_size: expected at least 1");
    return nullptr;
  }
  const struct {
    const char* name;
    long long value;
    size_t* field;
  } sizes[] = {{"count", count, &q.count},
               {"bytes", bytes, &q.bytes},
               {"direct_max_bytes", direct_max, &q.direct_max_bytes},
               {"leader_max_bytes", leader_max, &q.leader_max_bytes}};
  for (const auto& x : sizes) {
    if (x.value < 0) {
      PyErr_Format(PyExc_ValueError, "%s: expected a size of 0 or more, got %lld", x.name, x.value);
      return nullptr;
    }
    *x.field = size_t(x.value);
  }
  q.cuda = cuda;
  q.sparse = sparse;
  q.native_op = native_op;
  q.uniform = uniform;
  const Route r = pycomm::core::route(q);
  return Py_BuildValue("(ss)", runner_name(r.runner), algorithm_name(r.algorithm));
}

// A tuple of the names name_at(0), ..., name_at(n - 1).
template <typename NameAt>
PyObject* names(size_t n, NameAt name_at) {
  PyObject* t = PyTuple_New(Py_ssize_t(n));
  if (t == nullptr) return nullptr;
  for (size_t i = 0; i < n; ++i) {
    PyObject* s = PyUnicode_FromString(name_at(i));
    if (s == nullptr) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, Py_ssize_t(i), s);
  }
  return t;
}

PyMethodDef methods[] = {
    {"default_config", default_config, METH_VARARGS,
     "default_config(world, cores) -> dict: every setting's default for `world` ranks on `cores` "
     "cores (csrc/core/settings.h)."},
    {"settings", settings, METH_NOARGS,
     "settings() -> list of dict: the settings table (name, field, env, unit, factor from the "
     "variable's unit to the setting's, type, why)."},
    {"route", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(route)),
     METH_VARARGS | METH_KEYWORDS,
     "route(collective, *, cuda, sparse, native_op, hosts, uniform, local_size, count, bytes, "
     "direct_max_bytes, leader_max_bytes, dtype, op, contiguous) -> (plan, algorithm): the "
     "backend's routing rule "
     "(csrc/core/routing.h)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "pycomm._tables",
                      "pycomm's settings and routing tables, without torch.", -1, methods};

// PyModule_AddObject without its leak on failure; steals `value`.
int add(PyObject* m, const char* name, PyObject* value) {
  const int rc = PyModule_AddObjectRef(m, name, value);
  Py_XDECREF(value);
  return rc;
}

}  // namespace

PyMODINIT_FUNC PyInit__tables() {
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  const bool ok =
      add(m, "COLLECTIVES", names(kCollectives, [](size_t i) {
        return collective_name(Collective(i));
      })) == 0 &&
      add(m, "PLANS", names(kRunners, [](size_t i) { return runner_name(Runner(i)); })) == 0 &&
      add(m, "ALGORITHMS", names(kAlgorithms - 1, [](size_t i) {
        return algorithm_name(Algorithm(i + 1));  // every answer of route(): all but auto
      })) == 0 &&
      add(m, "REDUCE_OPS", names(std::size(kReduceOps), [](size_t i) {
        return op_name(kReduceOps[i]);
      })) == 0 &&
      add(m, "ALL_REDUCE_ALGORITHMS", names(std::size(kAllReduceAlgorithms), [](size_t i) {
        return algorithm_name(kAllReduceAlgorithms[i]);
      })) == 0;
  if (!ok) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
