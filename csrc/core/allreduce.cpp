#include "allreduce.h"

#include <cstring>
#include <vector>

#include "errors.h"
#include "reduce_kernels.h"
#include "ring_schedule.h"

namespace pycomm::core {
namespace {

Fingerprint fingerprint_of(const AllReduceArgs& a, Algorithm resolved) {
  Fingerprint fp;
  fp.kind = uint32_t(CollectiveKind::kAllReduce);
  fp.count = a.count;
  fp.dtype = uint32_t(a.dtype);
  fp.op = uint32_t(a.op);
  fp.algorithm = uint32_t(resolved);
  return fp;
}

// One shot per piece: copy into my slot, handshake, reduce every rank's slot in
// rank order. Pieces only when the tensor is larger than a slot.
void direct(ShmTransport& t, const AllReduceArgs& a, const Fingerprint& fp, InputBackup& backup) {
  const size_t esize = dtype_size(a.dtype);
  const size_t piece_elems = t.direct_bytes() / esize;
  const int world = t.world();
  char* data = static_cast<char*>(a.data);
  size_t done = 0;
  do {
    const size_t n = a.count - done < piece_elems ? a.count - done : piece_elems;
    std::memcpy(t.my_next_direct_slot(), data + done * esize, n * esize);
    t.handshake(fp);
    // A one-piece collective writes the tensor after its only wait, so it
    // needs no backup; a multi-piece one saves each piece it overwrites.
    if (n < a.count) backup.save(done * esize, n * esize);
    reduce_sources(a.dtype, a.op, data + done * esize, t.direct_slots(), world, n, world);
    done += n;
  } while (done < a.count);
}

void ring(ShmTransport& t, const AllReduceArgs& a, const Fingerprint& fp, InputBackup& backup) {
  t.handshake(fp);
  const int world = t.world();
  const int rank = t.rank();
  const size_t esize = dtype_size(a.dtype);
  const size_t sub_elems = t.ring_buffer_bytes() / accum_size(a.dtype);
  const size_t nsub = num_subchunks(a.count, world, sub_elems);
  // The actions depend on (rank, world) alone: computed once per thread, so a
  // small collective allocates nothing.
  thread_local std::vector<RingStep> steps;
  thread_local int steps_for[2] = {-1, -1};
  if (steps_for[0] != rank || steps_for[1] != world) {
    steps = ring_steps(rank, world);
    steps_for[0] = rank;
    steps_for[1] = world;
  }
  char* data = static_cast<char*>(a.data);
  for (size_t j = 0; j < nsub; ++j) {
    for (const RingStep& step : steps) {
      const Range rg = subchunk_range(a.count, world, step.chunk, j, sub_elems);
      char* local = data + rg.begin * esize;
      const size_t n = rg.size();
      switch (step.action) {
        case RingAction::kSendLocal: {
          backup.save(rg.begin * esize, n * esize);
          ring_first(a.dtype, local, t.send_buffer(), n);
          t.send_commit();
          break;
        }
        case RingAction::kReduceSend: {
          backup.save(rg.begin * esize, n * esize);
          const void* in = t.recv_buffer();
          ring_middle(a.dtype, a.op, in, local, t.send_buffer(), n);
          t.send_commit();
          t.recv_commit();
          break;
        }
        case RingAction::kReduceFinish: {
          backup.save(rg.begin * esize, n * esize);
          const void* in = t.recv_buffer();
          ring_last(a.dtype, a.op, in, local, local, t.send_buffer(), n, world);
          t.send_commit();
          t.recv_commit();
          break;
        }
        case RingAction::kCopyForward: {
          const void* in = t.recv_buffer();
          void* out = t.send_buffer();
          std::memcpy(local, in, n * esize);
          std::memcpy(out, local, n * esize);
          t.send_commit();
          t.recv_commit();
          break;
        }
        case RingAction::kCopyLast: {
          std::memcpy(local, t.recv_buffer(), n * esize);
          t.recv_commit();
          break;
        }
      }
    }
  }
}

}  // namespace

Algorithm resolve_algorithm(const AllReduceArgs& args, const ShmTransport& t,
                            const AllReduceTuning& tuning) {
  if (args.algorithm != Algorithm::kAuto) return args.algorithm;
  return args.count * dtype_size(args.dtype) <= tuning.direct_max_bytes ? Algorithm::kDirect
                                                                         : Algorithm::kRing;
}

void all_reduce(ShmTransport& t, const AllReduceArgs& a, const AllReduceTuning& tuning,
                InputBackup& backup) {
  t.begin("all_reduce");
  const Algorithm algo = resolve_algorithm(a, t, tuning);
  const Fingerprint fp = fingerprint_of(a, algo);
  backup.begin(a.data, a.count * dtype_size(a.dtype), tuning.restore_on_failure);
  try {
    if (algo == Algorithm::kRing && t.world() > 1 && a.count > 0) {
      ring(t, a, fp, backup);
    } else {
      // One rank, or nothing to move: the direct path still handshakes, so
      // mismatched calls are caught even then.
      direct(t, a, fp, backup);
    }
  } catch (const CommTimeout&) {
    backup.restore();
    throw;
  }
}

void barrier(ShmTransport& t) {
  t.begin("barrier");
  Fingerprint fp;
  fp.kind = uint32_t(CollectiveKind::kBarrier);
  t.handshake(fp);
}

}  // namespace pycomm::core
