// Where each rank's part of a gathered or scattered tensor lies: parts[r] in
// the list forms (a tensor per rank), else at r * bytes in one flat tensor.
#pragma once

#include <cstddef>
#include <type_traits>

namespace pycomm::core {

template <class C>  // char for outputs, const char for inputs
struct RankParts {
  using Void = std::conditional_t<std::is_const_v<C>, const void, void>;
  Void* const* list = nullptr;
  Void* flat = nullptr;
  size_t bytes = 0;  // one part's

  C* at(int r) const { return list ? static_cast<C*>(list[r]) : static_cast<C*>(flat) + size_t(r) * bytes; }
};

}  // namespace pycomm::core
