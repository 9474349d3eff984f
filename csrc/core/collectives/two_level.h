// The all-reduce of one host whose ranks span NUMA domains (sockets, or
// sub-NUMA clusters): every byte it reads across domains is one domain's
// partial sum, read once by one rank of each other domain.
//
// Per piece (a slot's worth of the tensor), with D domains of L_d ranks each:
//  1. every rank copies its piece into its slot (on its own node: numa_place.h);
//     handshake;
//  2. member i of each domain reduces share i of the piece (1/L_d of it) over
//     its domain's slots, in rank order, into its next slot; handshake;
//  3. member i of domain d reduces its share over the D domains' partials,
//     in domain order, reading each from the member of that domain that
//     holds it; handshake;
//  4. every rank copies each share from the member of its own domain that
//     holds it.
// Steps 2 and 4 read only the rank's own domain; step 3 reads (D-1)/L_d of
// the piece across domains. The flat ring reads 2(W-1)/W of it from rank-1,
// across a domain boundary on 2 of its links at every step, and waits for the
// slowest. With one domain, step 3 goes and step 2 applies the whole
// reduction: the classic reduce-scatter then all-gather through the slots.
//
// Results are bitwise equal on every rank: the D ranks that compute an element
// in step 3 read the same partials in the same order. They are not those of
// the ring (another order), and float16 and bfloat16 round each domain's
// partial to their type (the ring carries float32).
#pragma once

#include "collectives.h"

namespace pycomm::core {

// args.domain_of: each rank's domain, numbered 0..D-1 (null: one domain).
// The caller (all_reduce) has handshaked nothing yet and holds the backup.
void two_level_all_reduce(const Context& ctx, const AllReduceArgs& args, const Fingerprint& fp,
                          int divisor);

}  // namespace pycomm::core
