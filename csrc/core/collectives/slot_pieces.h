// The staging collectives move a tensor through the slots a piece at a time:
// body(first, n) for the pieces [first, first + n) of `count` elements, `piece`
// at most each. An empty tensor still makes one (empty) piece, because each
// piece opens with the handshake that catches a mismatched call.
#pragma once

#include <algorithm>
#include <cstddef>

namespace pycomm::core {

template <class Body>
inline void for_each_slot_piece(size_t count, size_t piece, Body&& body) {
  size_t done = 0;
  do {
    const size_t n = std::min(count - done, piece);
    body(done, n);
    done += n;
  } while (done < count);
}

}  // namespace pycomm::core
