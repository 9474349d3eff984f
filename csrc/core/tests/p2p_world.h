// What the point-to-point native tests share: ranks as threads over one
// mapping (so ThreadSanitizer sees every access), each with its engine, and
// the operations and patterns the tests post.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

#include "../errors.h"
#include "../p2p/p2p_engine.h"
#include "../transport/shm_data_path.h"
#include "check.h"
#include "rank_threads.h"

namespace pycomm::core {
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
    auto sessions = joined_sessions(world,
                                    transport == ShmTransport::kMemfd ? SegmentPlace::served(new_group_id())
                                                                      : SegmentPlace::named(new_segment_name()),
                                    wait, region);
    for (int r = 0; r < world; ++r) {
      auto rk = std::make_unique<Rank>();
      rk->session = std::move(sessions[size_t(r)]);
      rk->channels = std::make_unique<P2PChannels>(*rk->session);
      if (team_threads > 1) rk->team = std::make_unique<ThreadTeam>(team_threads, 64, 2.0);
      rk->cma = std::make_unique<CrossMemory>(*rk->session);
      rk->engine = std::make_unique<P2PEngine>(
          *rk->channels, [](uint32_t t) { return "type" + std::to_string(t); }, rk->team.get(), rk->cma.get(),
          straight_min_bytes);
      ranks.push_back(std::move(rk));
    }
    for (auto& rk : ranks) rk->session->start();
    const SingleCopy mode = straight_min_bytes ? SingleCopy::kCma : SingleCopy::kOff;
    for (const auto& e : run([&](int r) { ranks[size_t(r)]->cma->agree(mode); })) CHECK(e.empty());
  }

  P2PEngine& engine(int r) { return *ranks[size_t(r)]->engine; }
  size_t channel_bytes(int r) { return engine(r).channel_bytes(); }

  std::vector<std::string> run(const std::function<void(int)>& fn) { return run_on_threads(ranks.size(), fn); }
};

inline P2PHandle op(P2POp::Kind kind, int peer, int64_t tag, void* data, size_t bytes, uint32_t type = 1) {
  auto o = std::make_shared<P2POp>();
  o->kind = kind;
  o->peer = peer;
  o->tag = tag;
  o->data = static_cast<char*>(data);
  o->bytes = bytes;
  o->type = type;
  return o;
}

inline P2PHandle isend(P2PEngine& e, int peer, int64_t tag, std::vector<int32_t>& v) {
  auto o = op(P2POp::Kind::kSend, peer, tag, v.data(), v.size() * 4);
  e.post(o);
  return o;
}
inline P2PHandle irecv(P2PEngine& e, int peer, int64_t tag, std::vector<int32_t>& v) {
  auto o = op(P2POp::Kind::kRecv, peer, tag, v.data(), v.size() * 4);
  e.post(o);
  return o;
}

inline std::vector<int32_t> pattern(size_t n, int seed) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = int32_t(i * 7 + size_t(seed) * 1000003);
  return v;
}

inline bool no_errors(const std::vector<std::string>& errors) {
  bool ok = true;
  for (const auto& e : errors) {
    if (!e.empty()) std::fprintf(stderr, "  %s\n", e.c_str()), ok = false;
  }
  return ok;
}

}  // namespace
}  // namespace pycomm::core
