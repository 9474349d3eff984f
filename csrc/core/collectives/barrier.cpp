#include "collectives.h"

namespace pycomm::core {

// Returns once every rank has entered; raises CollectiveMismatch if a rank
// entered another collective.
void barrier(const Context& ctx) {
  ctx.session.begin("barrier");
  Fingerprint fp;
  fp.kind = uint32_t(CollectiveKind::kBarrier);
  ctx.session.handshake(fp);
}

}  // namespace pycomm::core
