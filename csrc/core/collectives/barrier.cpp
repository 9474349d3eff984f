#include "collectives.h"

namespace pycomm::core {

// Returns once every rank has entered; raises CollectiveMismatch if a rank
// entered another collective.
void barrier(const Context& ctx) {
  ctx.session.begin("barrier");
  ctx.session.handshake(fingerprint_of(FingerprintKind::kBarrier, 0, DType::kFloat32, Algorithm::kDirect));
}

}  // namespace pycomm::core
