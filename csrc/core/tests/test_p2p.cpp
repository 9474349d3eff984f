// Point-to-point (p2p/): the exchange patterns that deadlock a send that waits
// for its receive, ordering, any-source, mismatches and timeouts. Ranks run as
// threads over one mapping, so ThreadSanitizer sees every access.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>

#include "../errors.h"
#include "../p2p/p2p_engine.h"
#include "../transport/shm_data_path.h"
#include "check.h"
#include "rank_threads.h"

using namespace pycomm::core;

namespace {

struct Rank {
  std::unique_ptr<Session> session;
  std::unique_ptr<P2PChannels> channels;
  std::unique_ptr<ThreadTeam> team;  // outlives the engine
  std::unique_ptr<CrossMemory> cma;  // likewise
  std::unique_ptr<P2PEngine> engine;
};

struct World {
  std::vector<std::unique_ptr<Rank>> ranks;

  // Tiny frames by default: every message of more than a few bytes goes in
  // pieces, and a channel fills after two.
  // team_threads > 1: each rank's engine copies frames on a thread team that
  // splits even the smallest frame (shares of 64 bytes).
  // straight_min_bytes > 0: messages of that size and more go straight
  // (cross-memory attach, which threads of one process always agree on).
  World(int world, double timeout_s = 20, size_t frame_bytes = 256, size_t frames = 2,
        ShmTransport transport = ShmTransport::kPosix, int team_threads = 1, size_t straight_min_bytes = 0) {
    WaitPolicy wait;
    wait.timeout_s = timeout_s;
    wait.spin_us = 2;
    wait.yield_us = 20;
    DataRegion region = ShmDataPath::region(world, ShmDataConfig{});
    P2PConfig p2p;
    p2p.frame_bytes = frame_bytes;
    p2p.frames = frames;
    P2PChannels::reserve(region, world, p2p);
    for (int r = 0; r < world; ++r) {
      auto rk = std::make_unique<Rank>();
      const SegmentPlace place = transport == ShmTransport::kMemfd
                                     ? SegmentPlace::served(new_group_id())
                                     : SegmentPlace::named(new_segment_name());
      rk->session = r == 0 ? Session::create(0, world, place, wait, region)
                           : Session::join(r, *ranks[0]->session);
      rk->channels = std::make_unique<P2PChannels>(*rk->session);
      if (team_threads > 1) rk->team = std::make_unique<ThreadTeam>(team_threads, 64, 2.0);
      rk->cma = std::make_unique<CrossMemory>(*rk->session);
      rk->engine = std::make_unique<P2PEngine>(
          *rk->channels, [](uint32_t t) { return "type" + std::to_string(t); }, rk->team.get(), rk->cma.get(),
          straight_min_bytes);
      ranks.push_back(std::move(rk));
    }
    ranks[0]->session->unlink_name();
    for (auto& rk : ranks) rk->session->start();
    const SingleCopy mode = straight_min_bytes ? SingleCopy::kCma : SingleCopy::kOff;
    for (const auto& e : run([&](int r) { ranks[size_t(r)]->cma->agree(mode); })) CHECK(e.empty());
  }

  P2PEngine& engine(int r) { return *ranks[size_t(r)]->engine; }
  size_t channel_bytes(int r) { return engine(r).channel_bytes(); }

  std::vector<std::string> run(const std::function<void(int)>& fn) { return run_on_threads(ranks.size(), fn); }
};

P2PHandle op(P2POp::Kind kind, int peer, int64_t tag, void* data, size_t bytes, uint32_t type = 1) {
  auto o = std::make_shared<P2POp>();
  o->kind = kind;
  o->peer = peer;
  o->tag = tag;
  o->data = static_cast<char*>(data);
  o->bytes = bytes;
  o->type = type;
  return o;
}

P2PHandle isend(P2PEngine& e, int peer, int64_t tag, std::vector<int32_t>& v) {
  auto o = op(P2POp::Kind::kSend, peer, tag, v.data(), v.size() * 4);
  e.post(o);
  return o;
}
P2PHandle irecv(P2PEngine& e, int peer, int64_t tag, std::vector<int32_t>& v) {
  auto o = op(P2POp::Kind::kRecv, peer, tag, v.data(), v.size() * 4);
  e.post(o);
  return o;
}

std::vector<int32_t> pattern(size_t n, int seed) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = int32_t(i * 7 + size_t(seed) * 1000003);
  return v;
}

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

bool no_errors(const std::vector<std::string>& errors) {
  bool ok = true;
  for (const auto& e : errors) {
    if (!e.empty()) std::fprintf(stderr, "  %s\n", e.c_str()), ok = false;
  }
  return ok;
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

TEST(mismatched_pair_fails_on_both_ranks_and_the_channel_stays_usable) {
  // The send and the receive that differ both raise, from those very
  // operations; the replies after them go through on both sides.
  World w(2);
  std::vector<std::string> refused(2);
  std::vector<std::vector<int32_t>> after(2, std::vector<int32_t>(10));
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    if (r == 0) {
      std::vector<int32_t> four = pattern(4, 0);
      try {
        e.wait(isend(e, 1, 0, four));
      } catch (const CollectiveMismatch& m) {
        refused[0] = m.what();
      }
      std::vector<int32_t> done(1);
      e.wait(irecv(e, 1, 1, after[0]));
      e.wait(irecv(e, 1, 2, after[1]));
      e.wait(isend(e, 1, 3, done));
    } else {
      std::vector<int32_t> eight(8);
      try {
        e.wait(irecv(e, 0, 0, eight));
      } catch (const CollectiveMismatch& m) {
        refused[1] = m.what();
      }
      auto one = pattern(10, 7), two = pattern(10, 8);
      std::vector<int32_t> done(1);
      e.wait(isend(e, 0, 1, one));
      e.wait(isend(e, 0, 2, two));
      e.wait(irecv(e, 0, 3, done));
    }
  });
  CHECK(no_errors(errors));
  for (const auto& m : refused) {
    CHECK(m.find("rank 0 sent 16 bytes of type1 with tag 0, rank 1 receives 32 bytes") != std::string::npos);
  }
  CHECK(refused[1].find("rank 1: recv from rank 0") != std::string::npos);
  CHECK(refused[0].find("rank 0: send to rank 1 (tag 0, 16 bytes)") != std::string::npos);
  CHECK(after[0] == pattern(10, 7));
  CHECK(after[1] == pattern(10, 8));
}

TEST(a_mismatch_fails_only_its_pair_and_the_retry_goes_through) {
  // Issue 30: rank 0 sends 4 values, rank 1 receives 8: both raise. Both then
  // retry with 8, which goes through (the refusal raised nowhere else), and
  // rank 2, exchanging with both before, during and after, sees nothing of it.
  World w(3, 5);
  std::vector<std::string> refused(3);
  std::vector<int32_t> retried(8);
  std::vector<std::vector<int32_t>> from_third(2, std::vector<int32_t>(6));
  std::vector<std::vector<int32_t>> to_third(2, std::vector<int32_t>(6));
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    if (r == 2) {
      for (int round = 0; round < 3; ++round) {
        for (int peer : {0, 1}) {
          auto mine = pattern(6, 20 + peer + round);
          e.wait(isend(e, peer, 10 + round, mine));
          e.wait(irecv(e, peer, 20 + round, to_third[size_t(peer)]));
        }
      }
      return;
    }
    auto exchange_with_third = [&](int round) {
      e.wait(irecv(e, 2, 10 + round, from_third[size_t(r)]));
      auto back = pattern(6, 30 + r + round);
      e.wait(isend(e, 2, 20 + round, back));
    };
    exchange_with_third(0);
    // The receive is posted before the message can arrive (rank 1 says when):
    // a message that arrives while its receiver drives other operations is
    // taken into a buffer, which completes its send.
    std::vector<int32_t> go(1);
    try {
      if (r == 0) {
        e.wait(irecv(e, 1, 99, go));
        auto four = pattern(4, 1);
        e.wait(isend(e, 1, 0, four));
      } else {
        std::vector<int32_t> eight(8);
        auto v = irecv(e, 0, 0, eight);
        e.wait(isend(e, 0, 99, go));
        e.wait(v);
      }
    } catch (const CollectiveMismatch& m) {
      refused[size_t(r)] = m.what();
    }
    exchange_with_third(1);
    if (r == 0) {
      auto eight = pattern(8, 2);
      e.wait(isend(e, 1, 0, eight));
    } else {
      e.wait(irecv(e, 0, 0, retried));
    }
    exchange_with_third(2);
  });
  CHECK(no_errors(errors));
  CHECK(refused[0].find("rank 0: send to rank 1 (tag 0, 16 bytes): rank 0 sent 16 bytes of type1 with tag 0, "
                        "rank 1 receives 32 bytes") != std::string::npos);
  CHECK(refused[1].find("rank 1: recv from rank 0 (tag 0, 32 bytes): rank 0 sent 16 bytes") != std::string::npos);
  CHECK(retried == pattern(8, 2));
  for (int r : {0, 1}) {
    CHECK(from_third[size_t(r)] == pattern(6, 22 + r));
    CHECK(to_third[size_t(r)] == pattern(6, 32 + r));
  }
  for (int r = 0; r < 3; ++r) CHECK(!w.ranks[size_t(r)]->session->aborted());
}

TEST(several_refusals_in_flight_each_reach_their_own_send) {
  // Three mismatched isends in a row: the notice line carries one refusal at a
  // time, and each send waits for its own. Then a matching pair goes through.
  World w(2, 5, 4096, 4);
  std::vector<std::string> sent_errors(3), recv_errors(3);
  std::vector<int32_t> last(5);
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    std::vector<std::vector<int32_t>> bufs(3, std::vector<int32_t>(size_t(r == 0 ? 2 : 3)));
    std::vector<P2PHandle> ops;
    // The receives are posted first (rank 1 says when), so each message meets
    // its receive as it arrives.
    std::vector<int32_t> go(1);
    if (r == 0) {
      e.wait(irecv(e, 1, 99, go));
      for (int i = 0; i < 3; ++i) ops.push_back(isend(e, 1, 4, bufs[size_t(i)]));
    } else {
      for (int i = 0; i < 3; ++i) ops.push_back(irecv(e, 0, 4, bufs[size_t(i)]));
      e.wait(isend(e, 0, 99, go));
    }
    for (int i = 0; i < 3; ++i) {
      try {
        e.wait(ops[size_t(i)]);
      } catch (const CollectiveMismatch& m) {
        (r == 0 ? sent_errors : recv_errors)[size_t(i)] = m.what();
      }
    }
    auto five = pattern(5, 9);
    if (r == 0) {
      e.wait(isend(e, 1, 4, five));
    } else {
      e.wait(irecv(e, 0, 4, last));
    }
  });
  CHECK(no_errors(errors));
  for (int i = 0; i < 3; ++i) {
    CHECK(sent_errors[size_t(i)].find("rank 0 sent 8 bytes of type1 with tag 4, rank 1 receives 12 bytes") !=
          std::string::npos);
    CHECK(!recv_errors[size_t(i)].empty());
  }
  CHECK(last == pattern(5, 9));
}

TEST(type_mismatch_is_refused_too) {
  World w(2);
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    std::vector<int32_t> v(4);
    auto o = op(r == 0 ? P2POp::Kind::kSend : P2POp::Kind::kRecv, 1 - r, 0, v.data(), 16, r == 0 ? 1 : 2);
    e.post(o);
    e.wait(o);
  });
  for (int r : {0, 1}) {
    CHECK(errors[size_t(r)].rfind("mismatch: ", 0) == 0);
    CHECK(errors[size_t(r)].find("16 bytes of type1 with tag 0, rank 1 receives 16 bytes of type2") !=
          std::string::npos);
  }
}

TEST(a_message_taken_in_before_its_receive_and_refused_fails_the_receive_only) {
  // Rank 1 drives its engine (a receive from rank 0 with tag 2) while rank 0's
  // tag-1 message arrives: it is taken into a buffer, which completes the send.
  // The receive posted later refuses it; only that receive raises, and rank
  // 0's next operations are not touched.
  World w(2);
  std::string refused;
  std::vector<int32_t> reply(3);
  auto errors = w.run([&](int r) {
    P2PEngine& e = w.engine(r);
    if (r == 0) {
      auto two = pattern(2, 1), three = pattern(3, 2);
      e.wait(isend(e, 1, 1, two));
      e.wait(isend(e, 1, 2, three));
      e.wait(irecv(e, 1, 3, reply));
    } else {
      std::vector<int32_t> got2(3), got1(4);
      e.wait(irecv(e, 0, 2, got2));
      try {
        e.wait(irecv(e, 0, 1, got1));
      } catch (const CollectiveMismatch& m) {
        refused = m.what();
      }
      auto back = pattern(3, 5);
      e.wait(isend(e, 0, 3, back));
    }
  });
  CHECK(no_errors(errors));
  CHECK(refused.find("rank 0 sent 8 bytes of type1 with tag 1, rank 1 receives 16 bytes") != std::string::npos);
  CHECK(reply == pattern(3, 5));
}

TEST(receive_without_a_send_times_out_naming_the_peer) {
  World w(2, 0.3);
  const uint64_t t0 = monotonic_ns();
  auto errors = w.run([&](int r) {
    if (r == 1) return;
    std::vector<int32_t> v(4);
    w.engine(0).wait(irecv(w.engine(0), 1, 6, v));
  });
  const double elapsed = double(monotonic_ns() - t0) * 1e-9;
  CHECK(elapsed >= 0.3 && elapsed < 2.0);
  CHECK(errors[0].rfind("timeout: ", 0) == 0);
  CHECK(errors[0].find("recv from rank 1 (tag 6, 16 bytes): Timed out after 0.3 s, rank 1 sent no message") !=
        std::string::npos);
  // The session is aborted: the other rank's next call fails at once.
  errors = w.run([&](int r) {
    if (r != 1) return;
    std::vector<int32_t> v(4);
    isend(w.engine(1), 0, 6, v);
  });
  CHECK(errors[1].find("aborted by rank 0") != std::string::npos);
}

TEST(send_whose_receiver_never_looks_times_out) {
  // The message fits the channel, but a send completes only once its receiver
  // has taken it in: one that never does is named at the deadline.
  World w(2, 0.3);
  auto errors = w.run([&](int r) {
    if (r == 1) return;
    std::vector<int32_t> v(4);
    w.engine(0).wait(isend(w.engine(0), 1, 0, v));
  });
  CHECK(errors[0].find("send to rank 1 (tag 0, 16 bytes): Timed out after 0.3 s, rank 1 has not taken the "
                       "message in") != std::string::npos);
}

TEST(send_larger_than_the_channel_with_no_receive_times_out) {
  World w(2, 0.3);
  auto errors = w.run([&](int r) {
    if (r == 1) return;
    std::vector<int32_t> v(10000);
    w.engine(0).wait(isend(w.engine(0), 1, 0, v));
  });
  CHECK(errors[0].find("send to rank 1 (tag 0, 40000 bytes): Timed out after 0.3 s, rank 1 took 512 of") !=
        std::string::npos);
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

TEST(bad_peers_are_refused_before_anything_moves) {
  World w(2);
  std::vector<int32_t> v(1);
  for (int peer : {0, 2, -2}) {
    bool refused = false;
    try {
      w.engine(0).post(op(P2POp::Kind::kSend, peer, 0, v.data(), 4));
    } catch (const InvalidArgument& e) {
      refused = std::string(e.what()).find("dst: rank " + std::to_string(peer)) != std::string::npos;
    }
    CHECK(refused);
  }
  bool refused = false;
  try {
    w.engine(0).post(op(P2POp::Kind::kSend, P2POp::kAnySource, 0, v.data(), 4));
  } catch (const InvalidArgument&) {
    refused = true;
  }
  CHECK(refused);
}

TEST(closing_fails_what_is_pending) {
  World w(2);
  std::vector<int32_t> v(4);
  auto o = irecv(w.engine(0), 1, 0, v);
  w.engine(0).close();
  CHECK(o->done() && o->error());
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

TEST(a_straight_message_of_another_size_is_refused_on_both_ranks) {
  if (!single_copy_here()) return;
  World w(2, 20, 256, 2, ShmTransport::kPosix, 1, /*straight_min_bytes=*/1024);
  std::vector<int32_t> a = pattern(4000, 1), b(3000);
  auto errors = w.run([&](int r) {
    auto o = r == 0 ? isend(w.engine(0), 1, 3, a) : irecv(w.engine(1), 0, 3, b);
    w.engine(r).wait(o);
  });
  for (const auto& e : errors) CHECK(e.find("rank 0 sent 16000 bytes of type1 with tag 3, rank 1 receives 12000") != std::string::npos);
  // The pair goes on.
  std::vector<int32_t> c(4000);
  errors = w.run([&](int r) {
    auto o = r == 0 ? isend(w.engine(0), 1, 3, a) : irecv(w.engine(1), 0, 3, c);
    w.engine(r).wait(o);
  });
  for (const auto& e : errors) CHECK(e.empty());
  CHECK(c == a);
}

TEST(a_frame_that_does_not_fit_its_message_aborts_the_group) {
  // What a corrupt channel would hold: a frame whose payload lands past the
  // end of its message. The receiver refuses it rather than write there.
  World w(2, 20, 256, 2);
  std::vector<int32_t> into(8, -1);
  P2PChannels& ch = *w.ranks[0]->channels;
  ch.open_to(1);
  ch.send_header(1) = FrameHeader{0, 32, 32, 4, 32, 1, 0};  // 32 bytes at offset 32 of a 32-byte message
  ch.commit(1);
  ch.ring(1);
  auto errors = w.run([&](int r) {
    if (r == 1) w.engine(1).wait(irecv(w.engine(1), 0, 4, into));
  });
  CHECK(errors[1].find("does not fit its message (32 bytes at offset 32 of 32") != std::string::npos);
  CHECK(std::all_of(into.begin(), into.end(), [](int32_t v) { return v == -1; }));
  CHECK(w.ranks[0]->session->aborted());
}

TEST(a_message_larger_than_the_receiver_can_hold_aborts_the_group) {
  // The size a frame announces is the sender's word: a corrupt 2^62 bytes,
  // for which no receive is posted, fails the group instead of the allocation
  // taking (or exhausting) the receiver's memory.
  World w(2, 20, 256, 2);
  std::vector<int32_t> into(8, -1);
  P2PChannels& ch = *w.ranks[0]->channels;
  ch.open_to(1);
  ch.send_header(1) = FrameHeader{0, uint64_t(1) << 62, 0, 9, 32, 1, 0};
  ch.commit(1);
  ch.ring(1);
  auto errors = w.run([&](int r) {
    if (r == 1) w.engine(1).wait(irecv(w.engine(1), 0, 4, into));
  });
  CHECK(errors[1].find("announced a point-to-point message of 4611686018427387904 bytes") != std::string::npos);
  CHECK(errors[1].find("the channel is corrupt") != std::string::npos);
  CHECK(w.ranks[0]->session->aborted());
}

TEST_MAIN
