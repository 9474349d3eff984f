// The shared-memory data path under the collectives: the links' sizes and
// their layout in the region, how the region grows with the world, and where
// each rank's slots and incoming link are placed (NUMA).
#include <algorithm>
#include <cstring>

#include "collective_world.h"

using namespace pycomm::core;

// The link sizes (shm_data_path.h): the ring's link to rank+1 full size, the
// others sharing 512 KiB per rank; streams of many buffers on each, at worlds
// where the other links are smaller than the ring's (and W = 5 with three
// buffers of 64 KiB, where the budget, not link_bytes, sets them).
TEST(all_to_all_streams_through_links_of_each_size) {
  for (int world : {3, 5, 8}) {
    World w(world, default_buffers());
    ShmDataPath& p = *w.ranks[0]->path;
    CHECK_EQ(p.link_bytes_to(1), size_t(256) << 10);
    CHECK_EQ(p.link_bytes_from(world - 1), size_t(256) << 10);
    const size_t other = std::min(size_t(256) << 10, (size_t(512) << 10) / (size_t(world - 2) * 4) / 64 * 64);
    CHECK_EQ(p.link_bytes_to(2), other);
    CHECK_EQ(p.link_bytes_from(world - 2), other);
    CHECK_EQ(w.ranks[size_t(world - 1)]->path->link_bytes_from(world - 3), other);
    // Up to 4 * count int64 a pair: at W = 3, 5 pieces of 128 KiB; at W = 8,
    // 15 of 21 KiB; more than the link's 4 buffers in each case.
    const size_t count = world == 3 ? 20000 : 10000;
    check_all_to_all(w, count);
    check_all_to_all(w, 7);  // and small ones after, still in step
    check_all_to_all(w, count + 1);
  }
  Config c = default_buffers();
  c.data.link_bytes = 64 << 10;
  c.data.link_buffers = 3;
  World w(5, c);
  CHECK_EQ(w.ranks[0]->path->link_bytes_to(1), size_t(64) << 10);
  CHECK_EQ(w.ranks[0]->path->link_bytes_to(3), (size_t(512) << 10) / 9 / 64 * 64);
  check_all_to_all(w, 5000);
}

TEST(ring_all_reduce_uses_the_full_size_link_at_five_ranks) {
  World w(5, default_buffers());
  // 4 MiB and 8 MiB: 16 and 32 pieces of 256 KiB through each ring link.
  check_all_reduce<float>(w, DType::kFloat32, ReduceOp::kSum, (size_t(1) << 20) + 3, Algorithm::kRing);
  check_all_reduce<int64_t>(w, DType::kInt64, ReduceOp::kMax, (size_t(1) << 20) + 5, Algorithm::kRing);
  check_all_reduce<BFloat16>(w, DType::kBFloat16, ReduceOp::kSum, (size_t(1) << 20) + 1, Algorithm::kRing);
}

// Every link buffer each rank can fill lies inside the region, apart from
// every other and from the slots, and its receiver reads the same bytes.
TEST(link_buffers_are_disjoint_and_both_ends_agree) {
  for (int world : {2, 3, 5, 8}) {
    World w(world, default_buffers());
    struct Span { const char* begin; const char* end; };
    std::vector<Span> spans;
    const char* region = w.ranks[0]->session->data_region();
    const char* region_end = region + w.ranks[0]->session->data_bytes();
    for (int r = 0; r < world; ++r) {
      ShmDataPath& p = *w.ranks[size_t(r)]->path;
      for (int h = 0; h < 2; ++h) {
        const char* slot = static_cast<const char*>(h ? p.next_slot() : p.slot(r));
        spans.push_back({slot, slot + p.slot_bytes()});
      }
      for (int peer = 0; peer < world; ++peer) {
        if (peer == r) continue;
        for (size_t m = 0; m < p.link_buffers(); ++m) {
          char* b = static_cast<char*>(p.send_buffer(peer));
          spans.push_back({b, b + p.link_bytes_to(peer)});
          std::memset(b, (r * world + peer) & 0x7f, p.link_bytes_to(peer));
          p.send_commit(peer);
        }
      }
    }
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    CHECK(spans.front().begin >= region);
    CHECK(spans.back().end <= region_end);
    for (size_t i = 1; i < spans.size(); ++i) CHECK(spans[i - 1].end <= spans[i].begin);
    for (int r = 0; r < world; ++r) {
      ShmDataPath& p = *w.ranks[size_t(r)]->path;
      for (int from = 0; from < world; ++from) {
        if (from == r) continue;
        CHECK_EQ(p.link_bytes_from(from), w.ranks[size_t(from)]->path->link_bytes_to(r));
        for (size_t m = 0; m < p.link_buffers(); ++m) {
          const char* b = static_cast<const char*>(p.recv_buffer(from));
          const std::vector<char> want(p.link_bytes_from(from), char((from * world + r) & 0x7f));
          CHECK(std::memcmp(b, want.data(), want.size()) == 0);
          p.recv_commit(from);
        }
      }
    }
  }
}

// A group's data path stays within 2 MiB per rank plus its control lines
// (256 bytes a pair). Before, each rank had a link of 4 x 256 KiB to every
// peer under a 16 MiB cap: per rank 512 KiB + (W-1) MiB, so 1.5, 3.5, 7.5,
// 15.5 and 16.5 MiB at W = 2, 4, 8, 16, 32. W = 2 keeps its 3 MiB + 4 KiB.
TEST(data_region_grows_with_the_world_not_its_square) {
  const ShmDataConfig c;
  for (int world : {2, 4, 8, 16, 32, 64, 128}) {
    const size_t control = (size_t(256) * size_t(world) * size_t(world) + 4095) / 4096 * 4096;
    CHECK(ShmDataPath::bytes_per_rank(world, c) <= size_t(2) << 20);
    CHECK_EQ(ShmDataPath::region(world, c).bytes, control + ShmDataPath::bytes_per_rank(world, c) * size_t(world));
  }
  CHECK_EQ(ShmDataPath::region(2, c).bytes, (size_t(3) << 20) + 4096);
  CHECK_EQ(ShmDataPath::bytes_per_rank(2, c), 2 * (size_t(256) << 10) + 4 * (size_t(256) << 10));
}

TEST(each_rank_places_its_slots_and_incoming_link_on_its_node) {
  World w(3, default_buffers());
  for (int r = 0; r < 3; ++r) {
    const NumaPlacement& p = w.ranks[size_t(r)]->path->placement();
    if (p.why_not) {
      std::printf("  rank %d: not placed: %s\n", r, p.why_not);
      continue;
    }
    CHECK(p.node >= 0);
    // Two 256 KiB slots and a ring link of 4 x 256 KiB: 384 pages of 4 KiB, less
    // the partial pages at the edges.
    CHECK(p.pages >= (6 * 256 * 1024) / 4096 - 4);
    CHECK_EQ(p.on_node, p.pages);
  }
}

TEST_MAIN
