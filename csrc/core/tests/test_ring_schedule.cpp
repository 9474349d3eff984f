// The ring schedule is arithmetic: check it by simulating the ring symbolically.
#include <set>

#include "../ring_schedule.h"
#include "check.h"

using namespace pycomm::core;

TEST(chunks_cover_every_element_once) {
  for (size_t count : {0ul, 1ul, 2ul, 3ul, 7ul, 1023ul, 1025ul, (1ul << 20) + 3}) {
    for (int world = 1; world <= 9; ++world) {
      size_t next = 0;
      size_t largest = 0, smallest = ~size_t(0);
      for (int c = 0; c < world; ++c) {
        Range r = chunk_range(count, world, c);
        CHECK_EQ(r.begin, next);
        next = r.end;
        largest = std::max(largest, r.size());
        smallest = std::min(smallest, r.size());
      }
      CHECK_EQ(next, count);
      CHECK(largest - smallest <= 1);
    }
  }
}

TEST(subchunks_tile_each_chunk) {
  for (size_t count : {0ul, 5ul, 1000ul, 65537ul}) {
    for (int world = 1; world <= 5; ++world) {
      for (size_t sub : {1ul, 3ul, 64ul, 4096ul}) {
        const size_t nsub = num_subchunks(count, world, sub);
        for (int c = 0; c < world; ++c) {
          Range chunk = chunk_range(count, world, c);
          size_t next = chunk.begin;
          for (size_t j = 0; j < nsub; ++j) {
            Range r = subchunk_range(count, world, c, j, sub);
            CHECK_EQ(r.begin, next);
            CHECK(r.size() <= sub);
            next = r.end;
          }
          CHECK_EQ(next, chunk.end);
        }
      }
    }
  }
}

// Simulates one sub-chunk round: each message carries the set of ranks whose
// input it contains. Every rank must end with every chunk reduced over all ranks,
// and each rank's sends must match its successor's receives.
TEST(ring_steps_reduce_and_gather_every_chunk) {
  for (int world = 2; world <= 8; ++world) {
    std::vector<std::vector<RingStep>> steps(world);
    for (int r = 0; r < world; ++r) {
      steps[r] = ring_steps(r, world);
      CHECK_EQ(steps[r].size(), size_t(2 * world - 1));
    }
    // have[r][c]: ranks reduced into rank r's copy of chunk c (output written).
    std::vector<std::vector<std::set<int>>> out(world, std::vector<std::set<int>>(world));
    // msg[r][k]: (chunk, contributors) of the k-th message rank r sends.
    std::vector<std::vector<std::pair<int, std::set<int>>>> msg(world);
    const size_t nsteps = steps[0].size();
    for (size_t k = 0; k < nsteps; ++k) {
      for (int r = 0; r < world; ++r) {
        const RingStep s = steps[r][k];
        const int prev = (r + world - 1) % world;
        std::set<int> in;
        if (k > 0) {
          const auto& m = msg[prev][k - 1];
          CHECK_EQ(m.first, s.chunk);  // receives the chunk it works on
          in = m.second;
        }
        std::set<int> value = in;
        switch (s.action) {
          case RingAction::kSendLocal:
          case RingAction::kReduceSend:
            value.insert(r);
            msg[r].push_back({s.chunk, value});
            break;
          case RingAction::kReduceFinish:
            value.insert(r);
            out[r][s.chunk] = value;
            msg[r].push_back({s.chunk, value});
            break;
          case RingAction::kCopyForward:
            out[r][s.chunk] = value;
            msg[r].push_back({s.chunk, value});
            break;
          case RingAction::kCopyLast:
            out[r][s.chunk] = value;
            break;
        }
      }
    }
    for (int r = 0; r < world; ++r) {
      for (int c = 0; c < world; ++c) CHECK_EQ(out[r][c].size(), size_t(world));
      CHECK_EQ(msg[r].size(), nsteps - 1);
    }
  }
}

TEST(owned_chunk_is_last_reduce_scatter_receive) {
  for (int world = 2; world <= 8; ++world) {
    for (int r = 0; r < world; ++r) {
      CHECK_EQ(rs_recv_chunk(r, world - 2, world), owned_chunk(r, world));
      CHECK_EQ(ag_send_chunk(r, 0, world), owned_chunk(r, world));
      // Rank r-1 owns the chunk rank r first receives in the all-gather.
      CHECK_EQ(ag_recv_chunk(r, 0, world), owned_chunk((r + world - 1) % world, world));
    }
  }
}

TEST_MAIN
