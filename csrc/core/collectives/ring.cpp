#include "ring.h"

#include <vector>

#include "../kernels/thread_team.h"
#include "../ring_schedule.h"

namespace pycomm::core {
namespace {

struct RingJob {
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int divisor = 1;
  size_t count = 0;  // elements of the whole vector: world chunks (ring_schedule.h)
  bool reduce_scatter = false;
  bool all_gather = false;
  // reduce-scatter: every chunk's input, at its offset in the vector.
  const char* input = nullptr;
  // all-gather: every chunk's output, at its offset in the vector. With both
  // halves and output == input the ring runs in place (an all-reduce), and
  // each slice is saved to the context's backup before it is overwritten.
  char* output = nullptr;
  // reduce-scatter alone: where this rank's finished chunk goes.
  char* owned_output = nullptr;
  // all-gather alone: this rank's own chunk (copied into output too).
  const char* owned_input = nullptr;
};

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

void run_ring(const Context& ctx, const Fingerprint& fp, const RingJob& job) {
  ctx.session.handshake(fp);
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

}  // namespace

void ring_all_reduce(const Context& ctx, const Fingerprint& fp, DType dtype, ReduceOp op, int divisor,
                     char* data, size_t count) {
  run_ring(ctx, fp, RingJob{.dtype = dtype, .op = op, .divisor = divisor, .count = count, .reduce_scatter = true,
                            .all_gather = true, .input = data, .output = data});
}

void ring_reduce_scatter(const Context& ctx, const Fingerprint& fp, DType dtype, ReduceOp op, int divisor,
                         const char* input, size_t count, char* owned_output) {
  run_ring(ctx, fp, RingJob{.dtype = dtype, .op = op, .divisor = divisor, .count = count, .reduce_scatter = true,
                            .input = input, .owned_output = owned_output});
}

void ring_all_gather(const Context& ctx, const Fingerprint& fp, DType dtype, char* output, size_t count,
                     const char* owned_input) {
  run_ring(ctx, fp, RingJob{.dtype = dtype, .count = count, .all_gather = true, .output = output,
                            .owned_input = owned_input});
}

}  // namespace pycomm::core
