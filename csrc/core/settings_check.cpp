#include "settings_check.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "errors.h"

namespace pycomm::core {
namespace {

struct Row {
  const char* name;
  const char* env;
  const char* unit;
  double factor;  // from the variable's unit to the setting's
  SettingBounds bounds;
  bool choice;
};

// settings.h's rows, in its order.
#define PYCOMM_ROW(name, field, env, unit, factor, bounds, value, why) \
  Row{#name, env, unit, double(factor), bounds,                        \
      std::is_same_v<decltype(CommConfig().field), std::string>},
const Row kRows[] = {PYCOMM_SETTINGS(PYCOMM_ROW)};
#undef PYCOMM_ROW

const Row& row_named(const std::string& name) {
  for (const Row& r : kRows) {
    if (name == r.name) return r;
  }
  throw InvalidArgument("name: unknown setting '" + name + "'");
}

// A number as a person writes it: a whole one in full (4194304, not
// 4.194304e+06), any other as short as reads back the same (0.0625, nan, inf).
std::string number_text(double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 0x1p53) {
    return std::to_string(int64_t(v));
  }
  char text[32];
  const auto end = std::to_chars(text, text + sizeof(text), v).ptr;
  return std::string(text, end);
}

// The unit after a number: none for a count or a switch.
std::string unit_after(const Row& r) {
  const std::string unit = r.unit;
  return unit == "count" || unit == "0/1" ? "" : " " + unit;
}

void check(const Row& r, double value, const std::string& source) {
  // Written so that nan, which compares false, is refused.
  if (value >= r.bounds.lo && value <= r.bounds.hi) return;
  const std::string unit = unit_after(r);
  throw InvalidArgument(source + ": expected " + number_text(r.bounds.lo / r.factor) + " to " +
                        number_text(r.bounds.hi / r.factor) + unit + ", got " +
                        number_text(value / r.factor) + unit);
}

template <typename T>
void check_field(const char* name, const T& value, const std::string& source) {
  if constexpr (!std::is_same_v<T, std::string>) check(row_named(name), double(value), source);
}

}  // namespace

void check_setting(const std::string& name, double value, const std::string& source) {
  const Row& r = row_named(name);
  if (r.choice) {
    throw InvalidArgument(source + ": setting '" + name + "' is a choice (" + r.unit + "), not a number");
  }
  check(r, value, source);
}

void check_config(const CommConfig& c) {
#define PYCOMM_CHECK_FIELD(name, field, env, unit, factor, bounds, value, why) \
  check_field(#name, c.field, "config '" #name "' (" env ")");
  PYCOMM_SETTINGS(PYCOMM_CHECK_FIELD)
#undef PYCOMM_CHECK_FIELD
}

}  // namespace pycomm::core
