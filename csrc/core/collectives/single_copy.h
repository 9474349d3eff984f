// What the single-copy forms of the collectives share (Algorithm::kSingleCopy,
// transport/cross_memory.h). Each runs between two handshakes:
//
//   1. every rank announces where its tensors lie, in its slot (announce()),
//      and enters the handshake that opens the collective (fingerprints
//      compared, as on the staging path);
//   2. each rank copies what it needs straight out of its peers' tensors
//      (read(), split among its thread team; a reduction reads its peers'
//      pieces into a small scratch that stays in cache), and writes only its
//      own memory;
//   3. every rank enters the handshake that closes it (release()): a rank
//      returns, and may reuse its tensors, only once every peer has read them.
//
// What a peer announced is checked before it is read: the size it names
// must be the one the fingerprint implies (a mismatch there is a bug, and
// aborts the group rather than read a wrong range).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives.h"
#include "rank_parts.h"

namespace pycomm::core {

// One tensor of a rank's, as it announces it: an address in its own memory
// and the bytes there its peers may read until the collective closes.
struct Announced {
  uint64_t address = 0;
  uint64_t bytes = 0;
};

// The announcements this rank fills before the opening handshake: `n` of them.
Announced* announce(const Context& ctx, size_t n);
// Where `peer`'s announcement `index` says its tensor lies, once it is
// checked to hold exactly `bytes`.
uint64_t announced_at(const Context& ctx, int peer, size_t index, size_t bytes);

// Where every peer's announcement 0 says its tensor lies, each checked to
// hold `bytes` (this rank's entry is 0), for reduce_from_peers. Valid until
// the thread's next call.
const uint64_t* announced_by_peers(const Context& ctx, size_t bytes);

// Copies `bytes` at `peer`'s address `remote` into `local`, split among the
// rank's thread team.
void read(const Context& ctx, int peer, void* local, uint64_t remote, size_t bytes);

// The closing handshake (step 3).
void release(const Context& ctx, const Fingerprint& fp);

// all_gather (every rank collects) and gather (the root does), from opening
// to closing handshake: every rank announces `bytes` at `input`; a collector
// copies its own to out.at(rank) and reads every peer's to out.at(peer).
void gather_single_copy(const Context& ctx, const Fingerprint& fp, const char* input, size_t bytes,
                        const RankParts<char>& out, bool collect);

// A reduction over every rank's tensor, of elements [first, first + n) of
// each, in rank order, into out[0, n) (which may be where they lie in this
// rank's own tensor): `mine` is this rank's tensor, `theirs[r]` where rank
// r's lies (announced).
// Split among the thread team; each share goes in pieces that stay in cache.
void reduce_from_peers(const Context& ctx, DType dtype, ReduceOp op, int divisor, void* out, const void* mine,
                       const uint64_t* theirs, size_t first, size_t n);

}  // namespace pycomm::core
