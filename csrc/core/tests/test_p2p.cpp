// Point-to-point (p2p/): the exchange patterns that deadlock a send that waits
// for its receive, ordering, any-source, unexpected messages, the helper
// thread and straight (single-copy) messages. Ranks run as threads over one
// mapping (p2p_world.h). Mismatches, timeouts and refusals:
// test_p2p_failures.cpp.
#include <chrono>
#include <thread>

#include "p2p_world.h"

using namespace pycomm::core;

namespace {

// Rank 0 sends tag 5 (many frames), and 20 ms later tag 7; rank 1 waits for tag 7
// first, so tag 5 is held, then taken into a buffer of its own, then received.
void tag_five_arrives_before_its_receive(P2PEngine& e, int r, std::vector<int32_t>& five,
                                         std::vector<int32_t>& seven) {
  if (r == 0) {
    auto a = pattern(five.size(), 5), b = pattern(seven.size(), 7);
    auto s1 = isend(e, 1, 5, a);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    e.wait(isend(e, 1, 7, b));
    e.wait(s1);
  } else {
    e.wait(irecv(e, 0, 7, seven));
    e.wait(irecv(e, 0, 5, five));
  }
}

}  // namespace

TEST(ping_pong_every_size_from_zero) {
  World w(2);
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(63), size_t(64), size_t(65), size_t(1023),
                   size_t(100003)}) {
    std::vector<std::vector<int32_t>> got(2, std::vector<int32_t>(n, -1));
    auto errors = w.run([&](int r) {
      auto mine = pattern(n, r);
      if (r == 0) {
        w.engine(0).wait(isend(w.engine(0), 1, 5, mine));
        w.engine(0).wait(irecv(w.engine(0), 1, 5, got[0]));
      } else {
        w.engine(1).wait(irecv(w.engine(1), 0, 5, got[1]));
        w.engine(1).wait(isend(w.engine(1), 0, 5, mine));
      }
    });
    CHECK(no_errors(errors));
    CHECK(got[0] == pattern(n, 1));
    CHECK(got[1] == pattern(n, 0));
  }
}

// A channel exists once its pair has talked, and only then: a group that never
// sends maps none, a send maps one on each side of its pair, and over either
// transport the bytes arrive.
TEST(channels_are_made_when_a_pair_first_talks) {
  for (ShmTransport transport : {ShmTransport::kPosix, ShmTransport::kMemfd}) {
    World w(3, 20, 1024, 2, transport);
    for (int r = 0; r < 3; ++r) CHECK(w.channel_bytes(r) == 0);
    CHECK(no_errors(w.run([&](int r) {
      std::vector<int32_t> v = pattern(1000, 0), got(1000);
      if (r == 0) w.engine(0).wait(isend(w.engine(0), 1, 5, v));
      if (r == 1) {
        w.engine(1).wait(irecv(w.engine(1), 0, 5, got));
        CHECK(got == v);
      }
    })));
    const size_t one = w.channel_bytes(0);
    CHECK(one > 0 && w.channel_bytes(1) == one && w.channel_bytes(2) == 0);
    // The reverse direction is a channel of its own.
    CHECK(no_errors(w.run([&](int r) {
      std::vector<int32_t> v = pattern(10, 1), got(10);
      if (r == 1) w.engine(1).wait(isend(w.engine(1), 0, 6, v));
      if (r == 0) {
        w.engine(0).wait(irecv(w.engine(0), P2POp::kAnySource, 6, got));
        CHECK(got == v);
      }
    })));
    CHECK(w.channel_bytes(0) == 2 * one && w.channel_bytes(1) == 2 * one && w.channel_bytes(2) == 0);
  }
}

TEST(both_ranks_send_first_far_larger_than_the_channel) {
  // Blocking sends on both sides before either receives: 1 MB each way through
  // a channel of 2 x 256 bytes. Each rank's wait drains what arrives.
  World w(2);
  const size_t n = 250000;
  std::vector<std::vector<int32_t>> got(2, std::vector<int32_t>(n));
  auto errors = w.run([&](int r) {
    auto mine = pattern(n, r);
    P2PEngine& e = w.engine(r);
    e.wait(isend(e, 1 - r, 0, mine));
    e.wait(irecv(e, 1 - r, 0, got[size_t(r)]));
  });
  CHECK(no_errors(errors));
  CHECK(got[0] == pattern(n, 1));
  CHECK(got[1] == pattern(n, 0));
}

TEST(frames_copied_by_a_thread_team_arrive_whole_both_ways_and_unexpected) {
  // Frames of 4 KiB split among 3 threads each side; both ranks send 1 MB at
  // once, then a message that arrives before its receive (held, then copied
  // into a buffer of its own) and one that is received as it streams.
  World w(2, 20, 4096, 2, ShmTransport::kPosix, 3);
  const size_t n = 250000;
  std::vector<std::vector<int32_t>> got(2, std::vector<int32_t>(n));
  std::vector<int32_t> late(5000), small(4);
  auto errors = w.run([&](int r) {
    auto mine = pattern(n, r);
    P2PEngine& e = w.engine(r);
    e.wait(isend(e, 1 - r, 0, mine));
    e.wait(irecv(e, 1 - r, 0, got[size_t(r)]));
    tag_five_arrives_before_its_receive(e, r, late, small);
  });
  CHECK(no_errors(errors));
  CHECK(got[0] == pattern(n, 1));
  CHECK(got[1] == pattern(n, 0));
  CHECK(late == pattern(late.size(), 5) && small == pattern(4, 7));
}

TEST(ring_of_sends_with_receives_posted_at_once) {
  // 1F1B's steady state: each rank sends to the next while it receives from
  // the one before, both posted before either is waited for. Over both
  // transports: the channels are made while the ring is already under way.
  for (ShmTransport transport : {ShmTransport::kPosix, ShmTransport::kMemfd}) {
    for (int world : {2, 3, 4}) {
      World w(world, 20, 256, 2, transport);
      const size_t n = 50000;
      std::vector<std::vector<int32_t>> got(static_cast<size_t>(world), std::vector<int32_t>(n));
      auto errors = w.run([&](int r) {
        auto mine = pattern(n, r);
        P2PEngine& e = w.engine(r);
        auto s = isend(e, (r + 1) % world, 3, mine);
        auto v = irecv(e, (r + world - 1) % world, 3, got[size_t(r)]);
        e.wait(s);
        e.wait(v);
      });
      CHECK(no_errors(errors));
      for (int r = 0; r < world; ++r) CHECK(got[size_t(r)] == pattern(n, (r + world - 1) % world));
    }
  }
}

TEST(many_small_messages_in_flight_keep_their_order) {
  World w(2, 20, 4096, 4);
  const int count = 2000;
  std::vector<std::vector<int32_t>> got(static_cast<size_t>(count), std::vector<int32_t>(2));
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    std::vector<P2PHandle> ops;
    std::vector<std::vector<int32_t>> sent(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      // Two tags interleaved: the order holds within each.
      if (r == 0) {
        sent[size_t(i)] = {i, i % 2};
        ops.push_back(isend(e, 1, i % 2, sent[size_t(i)]));
      } else {
        ops.push_back(irecv(e, 0, i % 2, got[size_t(i)]));
      }
    }
    for (auto& o : ops) e.wait(o);
  });
  CHECK(no_errors(errors));
  for (int i = 0; i < count; ++i) {
    CHECK_EQ(got[size_t(i)][0], i);
    CHECK_EQ(got[size_t(i)][1], i % 2);
  }
}

TEST(a_large_message_is_held_for_its_receive_then_taken_as_unexpected) {
  // Rank 1 waits for tag 7 while rank 0's tag 5 (many frames) sits at the head
  // of the channel: after the hold it goes into an unexpected buffer, so tag 7
  // behind it arrives, and the later receive of tag 5 takes it from there.
  World w(2);
  const size_t n = 5000;
  std::vector<int32_t> big(n), small(4);
  auto errors = w.run([&](int r) { tag_five_arrives_before_its_receive(w.engine(r), r, big, small); });
  CHECK(no_errors(errors));
  CHECK(big == pattern(n, 5) && small == pattern(4, 7));
  CHECK_EQ(w.engine(1).unexpected_messages(), uint64_t(1));
  // A receive posted before its message arrives takes it from the channel.
  errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    auto mine = pattern(n, 8);
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      e.wait(isend(e, 1, 5, mine));
    } else {
      e.wait(irecv(e, 0, 5, big));
    }
  });
  CHECK(no_errors(errors));
  CHECK(big == pattern(n, 8));
  CHECK_EQ(w.engine(1).unexpected_messages(), uint64_t(1));
}

TEST(a_receive_posted_long_before_its_send) {
  World w(2);
  std::vector<int32_t> got(3000);
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    if (r == 1) {
      e.wait(irecv(e, 0, 9, got));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      auto mine = pattern(3000, 4);
      e.wait(isend(e, 1, 9, mine));
    }
  });
  CHECK(no_errors(errors));
  CHECK(got == pattern(3000, 4));
}

TEST(receives_taken_in_another_tag_order_than_sent) {
  // Rank 0 sends tag 1, then tag 2 (each larger than the channel); rank 1
  // waits for tag 2 first. Tag 1 waits, unexpected, for its receive.
  World w(2);
  const size_t n = 20000;
  std::vector<int32_t> one(n), two(n);
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    if (r == 0) {
      auto a = pattern(n, 1), b = pattern(n, 2);
      auto s1 = isend(e, 1, 1, a);
      auto s2 = isend(e, 1, 2, b);
      e.wait(s1);
      e.wait(s2);
    } else {
      e.wait(irecv(e, 0, 2, two));
      e.wait(irecv(e, 0, 1, one));
    }
  });
  CHECK(no_errors(errors));
  CHECK(one == pattern(n, 1));
  CHECK(two == pattern(n, 2));
}

TEST(any_source_receives_say_who_sent) {
  World w(3);
  std::vector<std::vector<int32_t>> got(2, std::vector<int32_t>(500));
  std::vector<int> sources(2, -1);
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    if (r == 0) {
      for (int i = 0; i < 2; ++i) {
        auto o = irecv(e, P2POp::kAnySource, 4, got[size_t(i)]);
        e.wait(o);
        sources[size_t(i)] = o->source;
      }
    } else {
      auto mine = pattern(500, r);
      e.wait(isend(e, 0, 4, mine));
    }
  });
  CHECK(no_errors(errors));
  CHECK(sources[0] + sources[1] == 3 && sources[0] != sources[1]);
  for (int i = 0; i < 2; ++i) CHECK(got[size_t(i)] == pattern(500, sources[size_t(i)]));
}

TEST(an_isend_nobody_waits_for_completes_on_the_helper) {
  // The sender never calls wait: its helper thread streams the message.
  World w(2);
  const size_t n = 30000;
  std::vector<int32_t> got(n);
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    if (r == 0) {
      auto mine = pattern(n, 3);
      auto s = isend(e, 1, 0, mine);
      while (!s->done()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (s->error()) std::rethrow_exception(s->error());
    } else {
      e.wait(irecv(e, 0, 0, got));
    }
  });
  CHECK(no_errors(errors));
  CHECK(got == pattern(n, 3));
}

TEST(a_small_receive_nobody_waits_for_completes_once_helped) {
  // Whoever waits on a Future, or polls, does not drive the engine: help()
  // hands the receive to the helper.
  World w(2);
  std::vector<int32_t> got(8);
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    if (r == 1) {
      auto v = irecv(e, 0, 0, got);
      e.help(v);
      while (!v->done()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (v->error()) std::rethrow_exception(v->error());
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      auto mine = pattern(8, 6);
      e.wait(isend(e, 1, 0, mine));
    }
  });
  CHECK(no_errors(errors));
  CHECK(got == pattern(8, 6));
}

// Straight messages (the sender's memory read by the receiver, once): every
// exchange pattern above, at sizes on both sides of the threshold, so framed
// and straight messages mix on one channel and keep their order.
TEST(straight_messages_in_every_pattern_mixed_with_framed_ones) {
  if (!single_copy_here()) return;
  for (int team : {1, 3}) {
    World w(3, 20, 256, 2, ShmTransport::kPosix, team, /*straight_min_bytes=*/1024);
    for (size_t n : {0ul, 1ul, 200ul, 255ul, 256ul, 257ul, 5000ul, 70000ul}) {
      // A ring of sends, receives posted at once, both sizes in flight at once.
      std::vector<std::vector<int32_t>> got(3, std::vector<int32_t>(n)), small(3, std::vector<int32_t>(7));
      auto errors = w.run([&](int r) {
        auto a = pattern(n, r), b = pattern(7, r + 10);
        auto s1 = isend(w.engine(r), (r + 1) % 3, 1, a);
        auto s2 = isend(w.engine(r), (r + 1) % 3, 1, b);
        auto r1 = irecv(w.engine(r), (r + 2) % 3, 1, got[size_t(r)]);
        auto r2 = irecv(w.engine(r), (r + 2) % 3, 1, small[size_t(r)]);
        for (const auto& o : {s1, s2, r1, r2}) w.engine(r).wait(o);
      });
      for (const auto& e : errors) CHECK(e.empty());
      for (int r = 0; r < 3; ++r) {
        CHECK(got[size_t(r)] == pattern(n, (r + 2) % 3));
        CHECK(small[size_t(r)] == pattern(7, (r + 2) % 3 + 10));
      }
    }
    // Arriving before its receive: held, then taken into a buffer, then received.
    std::vector<int32_t> five(20000), seven(300);
    auto errors = w.run([&](int r) {
      if (r < 2) tag_five_arrives_before_its_receive(w.engine(r), r, five, seven);
    });
    for (const auto& e : errors) CHECK(e.empty());
    CHECK(five == pattern(20000, 5) && seven == pattern(300, 7));
  }
}

TEST_MAIN
