// The vocabulary ranks agree on when they enter a collective: its kind and
// algorithm, and the text that names a fingerprint in error messages.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "dtypes.h"
#include "shm_layout.h"

namespace pycomm::core {

enum class CollectiveKind : uint32_t { kAllReduce = 1, kBarrier = 2 };

enum class Algorithm : uint32_t {
  kAuto = 0,    // resolved to one of the below before any rank sends
  kDirect = 1,  // one shot: every rank reduces every peer's slot, in rank order
  kRing = 2,    // reduce-scatter then all-gather around the ring, pipelined
};

inline const char* kind_name(uint32_t k) {
  switch (CollectiveKind(k)) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "unknown";
}

inline const char* algorithm_name(uint32_t a) {
  switch (Algorithm(a)) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kRing: return "ring";
  }
  return "unknown";
}

inline std::string describe(const Fingerprint& fp) {
  std::ostringstream os;
  os << kind_name(fp.kind);
  if (CollectiveKind(fp.kind) == CollectiveKind::kAllReduce) {
    os << "(count=" << fp.count << ", dtype=" << dtype_name(DType(fp.dtype))
       << ", op=" << op_name(ReduceOp(fp.op)) << ", algorithm=" << algorithm_name(fp.algorithm)
       << ")";
  } else {
    os << "()";
  }
  return os.str();
}

// The first field in which two fingerprints differ, for the error message.
inline const char* first_difference(const Fingerprint& a, const Fingerprint& b) {
  if (a.kind != b.kind) return "collective";
  if (a.count != b.count) return "count";
  if (a.dtype != b.dtype) return "dtype";
  if (a.op != b.op) return "op";
  if (a.algorithm != b.algorithm) return "algorithm";
  return "nothing";
}

}  // namespace pycomm::core
