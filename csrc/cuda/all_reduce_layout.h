// Where each element of a CUDA all-reduce goes: which piece, chunk and block
// it belongs to, and where it sits in a staging buffer. Pure arithmetic shared
// by the kernels (device), the launcher (epochs_used) and the CPU test.
//
// Every split is in units of one 16-byte vector of elements, so each block's
// share starts 16-byte aligned whenever the tensor does, and the vectorised
// body covers all but a share's last few elements.
//
// Block independence: in every algorithm, block b of every rank touches only
// its own share of the elements, in input and output, and its own region of
// every staging buffer, the same region for the whole launch (a region reused
// for another block's data could still be read by a peer's block that has
// not yet passed its barrier). Regions move when the next launch has another
// block count: safe, since no peer reads a rank's staging buffer once that
// rank's launch has ended (every algorithm ends waiting for that). Block b
// synchronises with block b of the other ranks only (its flags are
// pad.barrier[b] and pad.ring_*[b]), so blocks never wait for each other, and
// the split must be the same function of (count, world, blocks, buffer size)
// on every rank.
#pragma once

#include <cstddef>
#include <cstdint>

#include "host_device.h"

namespace pycomm::cuda {

constexpr size_t kVectorBytes = 16;
// Slots a ring sender can fill ahead of its receiver. At least 2: a ring step
// reads the left neighbour's slot and fills its own, and with one slot every
// rank would wait for its right neighbour to free it, around the ring.
constexpr int kRingSlots = 4;
// The most elements one element loop covers: for_each_pack (all_reduce_elements.h)
// counts in 32 bits, which leaves registers to the loops' data. Every region
// and slot is capped at this many bytes (a staging buffer larger than blocks x
// this leaves the rest unused), so no loop over their elements exceeds it;
// copy_alone cuts a block's share into passes of at most this many.
constexpr size_t kMaxLoopElems = size_t(1) << 30;

struct ElemRange {
  size_t begin;
  size_t end;
  PYCOMM_HD size_t size() const { return end - begin; }
};

PYCOMM_HD size_t min_size(size_t a, size_t b) { return a < b ? a : b; }
PYCOMM_HD size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// Elements per 16-byte vector.
PYCOMM_HD size_t vector_elems(size_t elem_size) { return kVectorBytes / elem_size; }

// Part `part` of `parts` of `whole`, cut in units of `align` elements: the first
// units % parts parts get one unit more (core::chunk_range's rule, which this
// equals for align == 1), the last unit may be short.
PYCOMM_HD ElemRange split_aligned(ElemRange whole, int parts, int part, size_t align) {
  const size_t n = whole.size();
  const size_t units = ceil_div(n, align);
  const size_t base = units / size_t(parts);
  const size_t rem = units % size_t(parts);
  const size_t p = size_t(part);
  const size_t first = p * base + (p < rem ? p : rem);
  const size_t last = first + base + (p < rem ? 1 : 0);
  return ElemRange{whole.begin + min_size(n, first * align), whole.begin + min_size(n, last * align)};
}

// --- one-shot and two-shot: block b takes share b of the elements and owns
// bytes [b * region, (b + 1) * region) of every staging buffer, through which
// it moves its share piece by piece.
PYCOMM_HD size_t block_region_bytes(size_t buffer_bytes, int blocks) {
  return min_size(buffer_bytes / size_t(blocks), kMaxLoopElems) / kVectorBytes * kVectorBytes;
}

PYCOMM_HD ElemRange block_share(size_t count, int blocks, int block, size_t align) {
  return split_aligned(ElemRange{0, count}, blocks, block, align);
}

// One-shot: a block's region holds one piece of its share.
PYCOMM_HD size_t one_shot_piece_elems(size_t region_bytes, size_t elem_size) {
  const size_t align = vector_elems(elem_size);
  return region_bytes / elem_size / align * align;
}

// Two-shot: a block's region holds one piece of its share, then a result area
// for this rank's reduced chunk of that piece.
struct TwoShotLayout {
  size_t piece_elems;    // input area, at element 0 of the region
  size_t result_offset;  // in elements; the result area holds the largest chunk
};

PYCOMM_HD TwoShotLayout two_shot_layout(size_t region_bytes, size_t elem_size, int world) {
  const size_t align = vector_elems(elem_size);
  const size_t cap_units = region_bytes / elem_size / align;
  const size_t w = size_t(world);
  size_t units = cap_units * w / (w + 1);
  while (units > 0 && units + ceil_div(units, w) > cap_units) --units;
  return TwoShotLayout{units * align, units * align};
}

// --- ring: the staging buffer holds kRingSlots send slots per block. Block b
// takes share b of each chunk (so a rank's own chunk is spread over all its
// blocks) and sends it through its own slots. A slot
// carries one sub-chunk of a block's share of a chunk, as partial sums in the
// accumulation type (reduce-scatter) or final values (all-gather).
struct RingLayout {
  size_t slot_bytes;  // per block and slot; slot (s, b) is at byte (s * blocks + b) * slot_bytes
  size_t sub_elems;   // elements per sub-chunk
};

PYCOMM_HD RingLayout ring_layout(size_t buffer_bytes, int blocks, size_t elem_size, size_t accum_size) {
  const size_t slot_bytes =
      min_size(buffer_bytes / (size_t(kRingSlots) * size_t(blocks)), kMaxLoopElems) / kVectorBytes * kVectorBytes;
  const size_t align = vector_elems(elem_size);
  return RingLayout{slot_bytes, slot_bytes / accum_size / align * align};
}

// The ring's chunk arithmetic, as in core/ring_schedule.h (rank r owns chunk r;
// the CPU test checks these against it), callable on the device.
PYCOMM_HD int ring_wrap(int r, int world) { return ((r % world) + world) % world; }
// reduce-scatter step s: the chunk rank r sends (its partial) and receives.
PYCOMM_HD int ring_rs_send_chunk(int rank, int s, int world) { return ring_wrap(rank - 1 - s, world); }
PYCOMM_HD int ring_rs_recv_chunk(int rank, int s, int world) { return ring_wrap(rank - 2 - s, world); }
// all-gather step s: the finished chunk rank r receives (and forwards).
PYCOMM_HD int ring_ag_recv_chunk(int rank, int s, int world) { return ring_wrap(rank - 1 - s, world); }

PYCOMM_HD ElemRange ring_block_share(size_t count, int world, int chunk, int blocks, int block, size_t align) {
  return split_aligned(split_aligned(ElemRange{0, count}, world, chunk, align), blocks, block, align);
}

// Sub-chunks block `block` runs per chunk: enough for its largest share, the
// same for every chunk so both ends of a link count the same sends.
PYCOMM_HD size_t ring_subchunks(size_t count, int world, int blocks, int block, size_t align,
                                size_t sub_elems) {
  size_t most = 0;
  for (int c = 0; c < world; ++c) {
    const size_t n = ring_block_share(count, world, c, blocks, block, align).size();
    most = n > most ? n : most;
  }
  return ceil_div(most, sub_elems);
}

PYCOMM_HD ElemRange ring_subchunk(ElemRange share, size_t j, size_t sub_elems) {
  const size_t begin = min_size(share.end, share.begin + j * sub_elems);
  return ElemRange{begin, min_size(share.end, begin + sub_elems)};
}

// Sends (= receives) of one sub-chunk: world - 1 of each half.
PYCOMM_HD size_t ring_sends_per_subchunk(int world) { return 2 * size_t(world - 1); }

}  // namespace pycomm::cuda
