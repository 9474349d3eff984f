// A setting's value by its name ("auto", "cma", "off", ...): the one loop the
// settings' parsers share, each with its own table of names.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace pycomm::core {

// Sets *out to the value `name` has in `table` and returns true, or returns
// false (and leaves *out) where the table has no such name.
template <class E, size_t N>
bool parse_named_choice(const std::string& name, const std::pair<const char*, E> (&table)[N], E* out) {
  for (const auto& [n, value] : table) {
    if (name == n) {
      *out = value;
      return true;
    }
  }
  return false;
}

}  // namespace pycomm::core
