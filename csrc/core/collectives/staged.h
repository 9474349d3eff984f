// The one-shot staging forms, through the slots a piece at a time: every rank
// copies its piece into its own slot; after the handshake the ranks that
// collect (every rank, or the root alone) take every rank's piece, by a copy
// of each (gather) or by their reduction in rank order (reduce). The slots'
// two parities let the ranks fill piece k+1 while the collectors still read
// piece k; the next handshake is where they are done with it.
#pragma once

#include <cstddef>

#include "collectives.h"
#include "rank_parts.h"

namespace pycomm::core {

// all_gather (every rank collects) and gather (the root does): rank r's
// `count` elements of `input` go to out.at(r).
void gather_staged(const Context& ctx, const Fingerprint& fp, DType dtype, const char* input, size_t count,
                   const RankParts<char>& out, bool collect);

// all_reduce's direct form (every rank collects) and reduce (the root does),
// in place: a collector's `data` ends reduced over every rank. A one-piece
// call writes the tensor after its only wait, so it needs no backup; a
// multi-piece one saves each piece before it overwrites it.
void reduce_staged(const Context& ctx, const Fingerprint& fp, DType dtype, ReduceOp op, int divisor, char* data,
                   size_t count, bool collect);

}  // namespace pycomm::core
