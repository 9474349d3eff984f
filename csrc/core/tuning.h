// Every tuning default of pycomm, in one place. The Python layer reads them
// from here (pycomm._C.default_config) and lets PYCOMM_* environment variables
// override them; nothing else states a number.
#pragma once

#include <cstddef>

#include "collectives/collectives.h"
#include "transport/session.h"
#include "transport/shm_data_path.h"

namespace pycomm::core {

// A group that spans hosts (csrc/torch/hierarchical.h).
struct HierarchyTuning {
  // All-reduces up to this many bytes go through each host's leader; larger
  // ones (on hosts with equal rank counts) reduce-scatter, all-reduce the
  // shard between hosts, and all-gather.
  size_t leader_max_bytes = 0;
  // Those run in pieces of this size, pipelined: gloo reduces one while shared
  // memory scatters the next and gathers the one before.
  size_t piece_bytes = 0;
};

struct CommConfig {
  WaitPolicy wait;
  ShmDataConfig data;
  CollectiveTuning tuning;
  HierarchyTuning hierarchy;
};

// Defaults for `world` ranks on a host where this process may run on `cores`
// cores. Measured on the 2-core CI host (bench/collectives_perf.py):
inline CommConfig default_config(int world, int cores) {
  CommConfig c;
  c.wait.timeout_s = 300;
  // Spinning helps only when every rank has a core of its own; with more ranks
  // than cores it burns the time slice the awaited rank needs (3 ranks on 2
  // cores: 8-byte ring all-reduce 98 us with a 20 us spin, 16 us without).
  c.wait.spin_us = world <= cores ? 20 : 0;
  c.wait.yield_us = 200;
  c.data.slot_bytes = 256 * 1024;
  c.data.link_bytes = 256 * 1024;
  c.data.link_buffers = 4;
  // Two ranks: the pipelined ring beats the one-shot from 32 B up (32 KiB:
  // 4.4 us vs 9.6 us); three or four: the one-shot, with its single
  // synchronisation, is faster up to about 64 KiB.
  c.tuning.direct_max_bytes = world == 2 ? 64 : 64 * 1024;
  c.tuning.restore_on_failure = true;
  // Not yet measured on a GPU: large enough that a 25 MiB DDP bucket goes in
  // one piece.
  c.tuning.cuda_buffer_bytes = 32 << 20;
  // Measured with 4 ranks as 2 fake hosts on the 2-core host
  // (bench/collectives_perf.py --hosts 2): at 64 KiB the leader form took
  // 384 us in all, the shard form's gloo part alone 552 us. Larger sizes were
  // not compared between the two forms.
  c.hierarchy.leader_max_bytes = 64 << 10;
  c.hierarchy.piece_bytes = 4 << 20;
  return c;
}

}  // namespace pycomm::core
