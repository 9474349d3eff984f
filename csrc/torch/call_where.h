// What routing needs to know of a call's tensors (the routing table's query,
// FrontEnd::query): where they are, their layout and the first one's dtype.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace pycomm {

struct CallWhere {
  bool cuda = false;        // one is on a CUDA device
  bool sparse = false;      // one is sparse (or of another non-strided layout)
  bool contiguous = true;   // every strided one is contiguous, with no conj or neg bit
  bool typed = false;       // dtype is set: the first strided tensor's
  at::ScalarType dtype = at::kFloat;
};

inline void note(CallWhere& w, const at::Tensor& t) {
  if (!t.defined()) return;
  w.cuda |= t.is_cuda();
  if (t.layout() != at::kStrided) {
    w.sparse = true;
    return;
  }
  w.contiguous = w.contiguous && t.is_contiguous() && !t.is_conj() && !t.is_neg();
  if (!w.typed) {
    w.dtype = t.scalar_type();
    w.typed = true;
  }
}
inline void note(CallWhere& w, const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts) note(w, t);
}
inline void note(CallWhere& w, const std::vector<std::vector<at::Tensor>>& lists) {
  for (const auto& l : lists) note(w, l);
}

// The tensors of a call, in any of c10d's shapes (tensors, lists, lists of lists).
template <typename... Args>
CallWhere where_of(const Args&... args) {
  CallWhere w;
  (note(w, args), ...);
  return w;
}

}  // namespace pycomm
