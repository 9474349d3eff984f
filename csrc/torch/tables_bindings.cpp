#include "tables_bindings.h"

#include <iterator>
#include <string>
#include <type_traits>

#include "../core/routing.h"
#include "../core/settings_check.h"
#include "../core/tuning.h"

namespace py = pybind11;

namespace pycomm {
namespace {

using namespace pycomm::core;

template <typename T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, std::string>) return "choice";  // one of its unit's a/b/c
  else if constexpr (std::is_floating_point_v<T>) return "float";
  else return "int";
}

py::dict default_config_dict(int world, int cores) {
  return config_dict(core::default_config(world, cores));
}

py::list settings_rows() {
  py::list rows;
  CommConfig c;
#define PYCOMM_PUT_ROW(name, field, env, unit, factor, bounds, value, why)                  \
  rows.append(py::dict(py::arg("name") = #name, py::arg("field") = #field,                  \
                       py::arg("env") = env, py::arg("unit") = unit,                        \
                       py::arg("factor") = long(factor),                                    \
                       py::arg("type") = type_name<decltype(c.field)>(),                    \
                       py::arg("lo") = bounds.lo, py::arg("hi") = bounds.hi, py::arg("why") = why));
  PYCOMM_SETTINGS(PYCOMM_PUT_ROW)
#undef PYCOMM_PUT_ROW
  (void)c;
  return rows;
}

// What a config value of type T must be, for an error.
template <typename T>
const char* kind_of() {
  if constexpr (std::is_same_v<T, bool>) return "True or False";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else return "an integer of 0 or more, within 64 bits";
}

// The dict's value for setting `name`, as its field's type: a ValueError
// naming the key and its variable where it is missing or cannot be that
// type (a negative or huge integer for a size, a float for a count).
template <typename T>
T setting_of(const py::dict& d, const char* name, const char* env) {
  if (!d.contains(name)) throw py::value_error(std::string("config: missing setting '") + name + "'");
  const py::object value = d[name];
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::value_error(std::string("config '") + name + "' (" + env + "): expected " +
                          kind_of<T>() + ", got " + std::string(py::repr(value)));
  }
}

bool settings_row_named(const std::string& key) {
#define PYCOMM_IS_NAME(name, field, env, unit, factor, bounds, value, why) \
  if (key == #name) return true;
  PYCOMM_SETTINGS(PYCOMM_IS_NAME)
#undef PYCOMM_IS_NAME
  return false;
}

// The i for which name_at(i) is `name`, among 0 ... n - 1.
template <typename NameAt>
int index_of(const std::string& name, int n, NameAt name_at, const char* what) {
  std::string known;
  for (int i = 0; i < n; ++i) {
    if (name == name_at(i)) return i;
    known += std::string(i ? ", " : "") + name_at(i);
  }
  throw py::value_error(std::string(what) + ": unknown " + what + " '" + name +
                        "'; expected one of " + known);
}

// A size argument (any integer, as index() takes it): OverflowError beyond 64
// bits, ValueError below 0, so that a negative size is an error rather than a
// huge one.
size_t size_of(const char* name, const py::object& value) {
  const long long v = PyLong_AsLongLong(value.ptr());
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (v < 0) {
    throw py::value_error(std::string(name) + ": expected a size of 0 or more, got " +
                          std::to_string(v));
  }
  return size_t(v);
}

py::tuple route_of(const std::string& collective, bool cuda, bool sparse, bool native_op, int hosts,
                bool uniform, int local_size, const py::object& count, const py::object& bytes,
                const py::object& direct_max_bytes, const py::object& leader_max_bytes,
                const std::string& dtype, const std::string& op, bool contiguous, int domains,
                int smallest_domain, const std::string& two_level,
                const py::object& two_level_min_bytes, bool single_copy,
                const py::object& single_copy_min_bytes, const py::object& single_copy_rooted_max_bytes,
                bool symmetric) {
  RouteQuery q;
  q.collective = Collective(index_of(collective, kCollectives,
                                      [](int i) { return collective_name(Collective(i)); },
                                      "collective"));
  // dtype: a name of the core's reducible types (any other type routes as "opaque").
  q.dtype = opaque_dtype(0, 1);
  for (DType d : kReducibleDtypes) {
    if (dtype == dtype_name(d)) q.dtype = d;
  }
  if (is_opaque(q.dtype) && dtype != "opaque") {
    throw py::value_error("dtype: unknown dtype '" + dtype +
                          "'; expected a reducible dtype's name or 'opaque'");
  }
  // ReduceOp counts from 1.
  q.op = ReduceOp(index_of(op, int(ReduceOp::kBxor),
                           [](int i) { return op_name(ReduceOp(i + 1)); }, "op") +
                  1);
  if (hosts < 1 || local_size < 1 || domains < 1) {
    throw py::value_error("hosts, local_size, domains: expected at least 1");
  }
  q.count = size_of("count", count);
  q.bytes = size_of("bytes", bytes);
  q.direct_max_bytes = size_of("direct_max_bytes", direct_max_bytes);
  q.leader_max_bytes = size_of("leader_max_bytes", leader_max_bytes);
  q.two_level_min_bytes = size_of("two_level_min_bytes", two_level_min_bytes);
  q.single_copy = single_copy;
  q.single_copy_min_bytes = size_of("single_copy_min_bytes", single_copy_min_bytes);
  q.single_copy_rooted_max_bytes = size_of("single_copy_rooted_max_bytes", single_copy_rooted_max_bytes);
  q.domains = domains;
  q.smallest_domain = smallest_domain;
  if (!core::parse_two_level(two_level, &q.two_level)) {
    throw py::value_error("two_level: expected auto, on or off, got '" + two_level + "'");
  }
  q.cuda = cuda;
  q.sparse = sparse;
  q.native_op = native_op;
  q.uniform = uniform;
  q.contiguous = contiguous;
  q.symmetric = symmetric;
  q.hosts = hosts;
  q.local_size = local_size;
  const Route r = core::route(q);
  return py::make_tuple(plan_name(r.plan), algorithm_name(r.algorithm));
}

// A tuple of the names name_at(0), ..., name_at(n - 1).
template <typename NameAt>
py::tuple names(size_t n, NameAt name_at) {
  py::tuple t(n);
  for (size_t i = 0; i < n; ++i) t[i] = py::str(name_at(i));
  return t;
}

}  // namespace

py::dict config_dict(const core::CommConfig& c) {
  py::dict d;
#define PYCOMM_PUT_VALUE(name, field, env, unit, factor, bounds, value, why) d[#name] = c.field;
  PYCOMM_SETTINGS(PYCOMM_PUT_VALUE)
#undef PYCOMM_PUT_VALUE
  return d;
}

core::CommConfig config_from(const py::dict& d) {
  core::CommConfig c;
  for (auto item : d) {
    const std::string key = py::str(item.first);
    if (!settings_row_named(key)) throw py::value_error("config: unknown setting '" + key + "'");
  }
#define PYCOMM_FROM_DICT(name, field, env, unit, factor, bounds, value, why) \
  c.field = setting_of<decltype(c.field)>(d, #name, env);
  PYCOMM_SETTINGS(PYCOMM_FROM_DICT)
#undef PYCOMM_FROM_DICT
  // Before anything is sized from them: the dict may come from anyone's
  // environment, or be made by hand.
  core::check_config(c);
  return c;
}

void bind_tables(py::module_& m) {
  m.attr("COLLECTIVES") =
      names(kCollectives, [](size_t i) { return collective_name(Collective(i)); });
  m.attr("PLANS") = names(kPlanKinds, [](size_t i) { return plan_name(PlanKind(i)); });
  // Every answer of route(): each algorithm but auto.
  m.attr("ALGORITHMS") =
      names(kAlgorithms - 1, [](size_t i) { return algorithm_name(Algorithm(i + 1)); });
  m.attr("REDUCE_OPS") =
      names(std::size(kReduceOps), [](size_t i) { return op_name(kReduceOps[i]); });
  m.attr("ALL_REDUCE_ALGORITHMS") = names(std::size(kAllReduceAlgorithms), [](size_t i) {
    return algorithm_name(kAllReduceAlgorithms[i]);
  });
  m.def("default_config", &default_config_dict, py::arg("world"), py::arg("cores"),
        "default_config(world, cores) -> dict: every setting's default for `world` ranks on "
        "`cores` cores (csrc/core/settings.h).");
  m.def("settings", &settings_rows,
        "settings() -> list of dict: the settings table (name, field, env, unit, factor from "
        "the variable's unit to the setting's, type, lo and hi: its bounds in the setting's "
        "unit, why).");
  m.def("check_setting", &core::check_setting, py::arg("name"), py::arg("value"), py::arg("source"),
        "check_setting(name, value, source): ValueError, beginning with `source`, where `value` "
        "(in the setting's unit) is outside setting `name`'s bounds (csrc/core/settings.h).");
  m.def("route", &route_of, py::arg("collective"), py::kw_only(), py::arg("cuda") = false,
        py::arg("sparse") = false, py::arg("native_op") = true, py::arg("hosts") = 1,
        py::arg("uniform") = true, py::arg("local_size") = 1, py::arg("count") = 0,
        py::arg("bytes") = 0, py::arg("direct_max_bytes") = 0,
        py::arg("leader_max_bytes") = 0, py::arg("dtype") = "float32",
        py::arg("op") = "sum", py::arg("contiguous") = true, py::arg("domains") = 1,
        py::arg("smallest_domain") = 0, py::arg("two_level") = "auto",
        py::arg("two_level_min_bytes") = 0, py::arg("single_copy") = false,
        py::arg("single_copy_min_bytes") = 0, py::arg("single_copy_rooted_max_bytes") = 0,
        py::arg("symmetric") = false,
        "route(collective, *, cuda, sparse, native_op, hosts, uniform, local_size, count, "
        "bytes, direct_max_bytes, leader_max_bytes, dtype, op, contiguous, domains, "
        "smallest_domain, two_level, two_level_min_bytes, single_copy, single_copy_min_bytes, "
        "single_copy_rooted_max_bytes, symmetric) "
        "-> (plan, algorithm): the backend's routing rule (csrc/core/routing.h).");
}

}  // namespace pycomm
