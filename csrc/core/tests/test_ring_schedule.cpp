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
// input it contains. The i-th receive of a rank is its predecessor's i-th send.
// Reduce-scatter alone: rank r ends with chunk r reduced over all ranks; with
// the all-gather (alone or after it) every rank ends with every chunk.
TEST(ring_steps_reduce_and_gather_every_chunk) {
  struct Mode { bool rs, ag; };
  for (Mode mode : {Mode{true, true}, Mode{true, false}, Mode{false, true}}) {
    for (int world = 2; world <= 8; ++world) {
      std::vector<std::vector<RingStep>> steps(world);
      for (int r = 0; r < world; ++r) {
        steps[r] = ring_steps(r, world, mode.rs, mode.ag);
        CHECK_EQ(steps[r].size(), size_t((mode.rs ? world : 0) + (mode.ag ? world - 1 : 0) +
                                         (mode.ag && !mode.rs ? 1 : 0)));
      }
      // out[r][c]: ranks folded into rank r's output of chunk c.
      std::vector<std::vector<std::set<int>>> out(world, std::vector<std::set<int>>(world));
      std::vector<std::vector<std::pair<int, std::set<int>>>> msg(world);
      std::vector<size_t> received(world, 0);
      const size_t nsteps = steps[0].size();
      for (size_t k = 0; k < nsteps; ++k) {
        for (int r = 0; r < world; ++r) {
          const RingStep s = steps[r][k];
          const int prev = (r + world - 1) % world;
          std::set<int> value;
          const bool receives = s.action != RingAction::kSendLocal && s.action != RingAction::kSendOwned;
          if (receives) {
            CHECK(received[r] < msg[prev].size());
            const auto& m = msg[prev][received[r]++];
            CHECK_EQ(m.first, s.chunk);  // receives the chunk it works on
            value = m.second;
          }
          switch (s.action) {
            case RingAction::kSendLocal:
            case RingAction::kReduceSend:
              value.insert(r);
              msg[r].push_back({s.chunk, value});
              break;
            case RingAction::kFinish:
              value.insert(r);
              out[r][s.chunk] = value;
              msg[r].push_back({s.chunk, value});
              break;
            case RingAction::kFinishLast:
              value.insert(r);
              out[r][s.chunk] = value;
              break;
            case RingAction::kSendOwned:
              // All-gather alone: the owned chunk is "reduced" by definition.
              for (int q = 0; q < world; ++q) value.insert(q);
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
        CHECK_EQ(received[r], msg[(r + world - 1) % world].size());  // every send is received
        for (int c = 0; c < world; ++c) {
          const bool wanted = mode.ag || c == owned_chunk(r, world);
          CHECK_EQ(out[r][c].size(), wanted ? size_t(world) : size_t(0));
        }
      }
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
