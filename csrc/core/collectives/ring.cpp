#include "ring.h"

#include <vector>

#include "../kernels/thread_team.h"
#include "../ring_schedule.h"

namespace pycomm::core {
namespace {

// The actions depend on (rank, world, halves) alone: computed once per thread
// and kept, so that a small collective allocates nothing.
const std::vector<RingStep>& cached_steps(int rank, int world, bool rs, bool ag) {
  thread_local std::vector<RingStep> steps;
  thread_local int key[4] = {-1, -1, -1, -1};
  if (key[0] != rank || key[1] != world || key[2] != int(rs) || key[3] != int(ag)) {
    steps = ring_steps(rank, world, rs, ag);
    key[0] = rank;
    key[1] = world;
    key[2] = int(rs);
    key[3] = int(ag);
  }
  return steps;
}

}  // namespace

void run_ring(const Context& ctx, const RingJob& job) {
  ShmDataPath& p = ctx.path;
  ThreadTeam& team = ctx.team;
  const int world = ctx.session.world();
  const int rank = ctx.session.rank();
  const int next = (rank + 1) % world;
  const int prev = (rank + world - 1) % world;
  const size_t esize = dtype_size(job.dtype);
  // Reduce-scatter partials travel in the accumulation type (float32 for
  // half types), finished values in the tensor's own type.
  const size_t sub_elems = p.link_bytes() / (job.reduce_scatter ? accum_size(job.dtype) : esize);
  const size_t nsub = num_subchunks(job.count, world, sub_elems);
  const bool in_place = job.reduce_scatter && job.all_gather && job.output == job.input;
  const std::vector<RingStep>& steps = cached_steps(rank, world, job.reduce_scatter, job.all_gather);
  for (size_t j = 0; j < nsub; ++j) {
    for (const RingStep& step : steps) {
      const Range rg = subchunk_range(job.count, world, step.chunk, j, sub_elems);
      const size_t n = rg.size();
      const size_t at = rg.begin * esize;
      // Offset inside the chunk, for the owned_* pointers that hold one chunk.
      auto in_chunk = [&] { return (rg.begin - chunk_range(job.count, world, step.chunk).begin) * esize; };
      switch (step.action) {
        case RingAction::kSendLocal: {
          // In place, every slice is first touched here or in kReduceSend /
          // kFinish: save it then, while it is in cache.
          if (in_place) ctx.backup.save(at, n * esize);
          team_ring_first(team, job.dtype, job.input + at, p.send_buffer(next), n);
          p.send_commit(next);
          break;
        }
        case RingAction::kReduceSend: {
          if (in_place) ctx.backup.save(at, n * esize);
          const void* in = p.recv_buffer(prev);
          team_ring_middle(team, job.dtype, job.op, in, job.input + at, p.send_buffer(next), n);
          p.send_commit(next);
          p.recv_commit(prev);
          break;
        }
        case RingAction::kFinish: {
          if (in_place) ctx.backup.save(at, n * esize);
          const void* in = p.recv_buffer(prev);
          team_ring_last(team, job.dtype, job.op, in, job.input + at, job.output + at, p.send_buffer(next), n,
                         job.divisor);
          p.send_commit(next);
          p.recv_commit(prev);
          break;
        }
        case RingAction::kFinishLast: {
          const void* in = p.recv_buffer(prev);
          team_ring_last(team, job.dtype, job.op, in, job.input + at, job.owned_output + in_chunk(), nullptr,
                         n, job.divisor);
          p.recv_commit(prev);
          break;
        }
        case RingAction::kSendOwned: {
          const char* own = job.owned_input + in_chunk();
          if (job.output + at != own) team_copy(team, job.output + at, own, n * esize);
          team_copy(team, p.send_buffer(next), own, n * esize);
          p.send_commit(next);
          break;
        }
        case RingAction::kCopyForward: {
          const void* in = p.recv_buffer(prev);
          team_copy(team, job.output + at, in, n * esize);
          team_copy(team, p.send_buffer(next), in, n * esize);
          p.send_commit(next);
          p.recv_commit(prev);
          break;
        }
        case RingAction::kCopyLast: {
          team_copy(team, job.output + at, p.recv_buffer(prev), n * esize);
          p.recv_commit(prev);
          break;
        }
      }
    }
  }
}

}  // namespace pycomm::core
