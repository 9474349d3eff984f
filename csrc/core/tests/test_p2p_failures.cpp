// Point-to-point (p2p/) when a pair disagrees or a peer is gone: mismatched
// sizes and types fail their pair (and only it), waits time out naming the
// peer, bad peers are refused, closing fails what is pending, and a frame or a
// message that cannot be right aborts the group.
#include <chrono>
#include <thread>

#include "p2p_world.h"

using namespace pycomm::core;

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
