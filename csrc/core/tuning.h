// A communicator's settings and their defaults, made from the one settings
// table (settings.h, where each default's reason is stated).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "collectives/collectives.h"
#include "p2p/p2p_channels.h"
#include "settings.h"
#include "transport/session.h"
#include "transport/shm_data_path.h"

namespace pycomm::core {

// A group that spans hosts (csrc/torch/hierarchical_plan.h).
struct HierarchyTuning {
  size_t leader_max_bytes = 0;
  size_t piece_bytes = 0;
};

struct CommConfig {
  std::string shm_transport;  // auto, memfd or posix (pycomm/rendezvous.py decides)
  WaitPolicy wait;
  ShmDataConfig data;
  P2PConfig p2p;
  CollectiveTuning tuning;
  HierarchyTuning hierarchy;
};

// Defaults for `world` ranks on a host where this process may run on `cores` cores.
inline CommConfig default_config(int world, int cores) {
  CommConfig c;
#define PYCOMM_SET_DEFAULT(name, field, env, unit, factor, bounds, value, why) c.field = value;
  PYCOMM_SETTINGS(PYCOMM_SET_DEFAULT)
#undef PYCOMM_SET_DEFAULT
  return c;
}

}  // namespace pycomm::core
