// Point-to-point over the channels (p2p_channels.h): send and receive of any
// size, with tags, any-source receives, and one progress loop over every
// operation posted, so that ranks that send to each other at once never
// deadlock on bounded buffers.
//
//   post(op)   queues a send or a receive and makes what progress it can at
//              once: a message that fits the free frames is sent before post
//              returns; a receive whose message already arrived completes.
//   wait(op)   drives the progress loop in the calling thread until `op` is
//              complete, and rethrows its error.
//
// Progress is one pass over every peer: the queued sends stream their next
// frames into the free ones (a message larger than the channel goes in pieces
// as the receiver consumes them), and every arriving frame goes into the
// receive it matches, or, when none is posted yet, into an unexpected
// message held here until one is. A pass never waits, so every rank that is
// in the engine keeps every channel of its own moving: two ranks that both
// send first, rings of sends and messages far larger than a channel all
// complete. Whoever waits drives the passes; when nobody does while an
// operation that may stall is outstanding (an isend nobody waits for yet, a
// receive of more than one frame), a helper thread drives them, sleeping on
// the rank's doorbell between passes.
//
// Matching follows MPI's rules: an arriving message goes to the earliest
// posted receive with its source (or any source) and tag, and a receive takes
// the earliest unexpected message that fits, so messages between two ranks
// with the same tag arrive in the order they were sent.
//
// A message of at least straight_min_bytes, where the group reads its peers'
// memory (transport/cross_memory.h), goes straight: its one frame says where
// it lies in the sender's memory, and the receiver copies it from there into
// the receive it matches, once; the send completes when the receiver has
// judged it, which for such a message is after the copy. A large message of a
// stream of sends (others to its peer pending) goes through the frames
// instead, where the sender's core copies each in while the receiver's copies
// the one before out (a window of 2 MiB sends on the 2-core host: 194 us a
// message framed, 276 straight); a lone one, or a stream's of up to 512 KiB,
// is faster straight (a 2 MiB ping-pong: 200 us against 280; measured once on
// 2026-12-05; p2p_progress.cpp).
//
// A send completes once its bytes are in shared memory and the receiver has
// judged its message: matched it to a receive, or, with none posted yet, taken
// it into a buffer while it drives its other operations (so two ranks that
// both send first still complete; a rank that sends and then waits on
// something its receiver is not driving waits, as on gloo, whose sends wait
// for their receive). A receive whose message differs in size or type raises
// CollectiveMismatch and drops the message; the sender learns it through a
// notice, left before the message counts as judged, and its send raises the
// same. Errors stay where they happened: no other operation, peer or later
// call sees them, and the next pair goes through. (A message taken into a
// buffer and refused later fails its receive only: its send completed.)
// An operation not complete by its deadline (posted + the timeout) raises
// CommTimeout naming its peer, and aborts the session, as a collective's
// timeout does; so does a dead peer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../kernels/thread_team.h"
#include "../transport/cross_memory.h"
#include "p2p_channels.h"

namespace pycomm::core {

struct P2POp {
  enum class Kind : uint8_t { kSend, kRecv };
  static constexpr int kAnySource = -1;

  Kind kind = Kind::kSend;
  int peer = 0;          // send: the destination; recv: the source, or kAnySource
  int64_t tag = 0;
  char* data = nullptr;  // a send reads it, a receive writes it
  size_t bytes = 0;
  uint32_t type = 0;     // the element type (the glue's code): a send's and its receive's must match
  // Called once the operation completed or failed, in whichever thread
  // completed it, outside the engine's lock (it may post and wait).
  std::function<void(const P2POp&)> on_done;

  // The rank a receive's message came from (the peer, or whichever sent it
  // for an any-source receive). Valid once done().
  int source = -1;
  bool done() const { return state_.load(std::memory_order_acquire) != kPending; }
  // Null on success.
  std::exception_ptr error() const { return done() ? error_ : nullptr; }

 private:
  friend class P2PEngine;
  enum : int { kPending = 0, kFinished = 1 };
  std::atomic<int> state_{kPending};
  std::exception_ptr error_;
  // The engine's bookkeeping, under its lock.
  uint64_t message_ = 0;   // a send's message number on its channel
  size_t moved_ = 0;       // bytes committed (send) or received (recv)
  uint64_t deadline_ns_ = 0;
  std::exception_ptr refused_;  // a send the receiver refused: its error once it is judged
  bool streamed_ = false;  // a send whose every frame is committed (it waits for its verdict)
  bool helped_ = false;  // counted in the engine's helped_
};

using P2PHandle = std::shared_ptr<P2POp>;

class P2PEngine {
 public:
  // Names the glue's element type codes in error messages.
  using TypeName = std::function<std::string(uint32_t)>;

  // team: the rank's thread team, which copies a frame's payload when it is
  // large and the team is free (null: the engine's caller copies alone).
  // cma: how messages of at least straight_min_bytes go straight, where it
  // is enabled (null: every message goes through the frames).
  P2PEngine(P2PChannels& channels, TypeName type_name, ThreadTeam* team = nullptr,
            const CrossMemory* cma = nullptr, size_t straight_min_bytes = 0);
  ~P2PEngine();  // close()
  P2PEngine(const P2PEngine&) = delete;
  P2PEngine& operator=(const P2PEngine&) = delete;

  // Throws InvalidArgument for a peer out of range or this rank itself, and
  // the session's error once it was aborted.
  void post(const P2PHandle& op);
  void wait(const P2PHandle& op);
  // Has the helper drive `op` to completion when no thread waits: for callers
  // that wait elsewhere (on its Future) or poll whether it is done. post()
  // does it at once for what may stall, but not for a small receive, which
  // costs less to wait for than to wake a thread.
  void help(const P2PHandle& op);
  // Stops the helper; what is still pending fails (the communicator closes).
  void close();
  // Messages that arrived before their receive and were copied into a buffer
  // of their own (each a second copy): what the hold is there to avoid.
  uint64_t unexpected_messages();
  // Bytes of channels made and taken so far (P2PChannels::mapped_bytes).
  size_t channel_bytes();

 private:
  // A message that arrived before its receive was posted: its bytes wait here.
  struct Unexpected {
    int source;
    int64_t tag;
    uint32_t type;
    uint64_t message;
    uint64_t arrival;  // across sources, for any-source receives
    size_t bytes;
    std::unique_ptr<char[]> data;  // not zeroed: every byte is written before it is read
    size_t got = 0;
  };
  // The message now arriving from a peer, part way: it goes into `recv`, or
  // into `unexpected`, or (neither: it was refused) nowhere.
  struct Incoming {
    bool active = false;
    uint64_t message = 0;
    size_t total = 0;
    size_t got = 0;
    P2PHandle recv;
    std::shared_ptr<Unexpected> unexpected;
  };
  using Done = std::vector<P2PHandle>;

  // One pass over every peer; true if anything moved. All *_locked under mu_.
  bool pass_locked(Done& done);
  // A frame's payload: on the team when there is one (thread_team.h), else memcpy.
  void copy(void* dst, const void* src, size_t bytes);
  // Whether `op` goes straight (see above).
  bool straight(const P2POp& op) const;
  // A straight message's bytes, out of `peer`'s memory (on the team when
  // there is one); false, with every operation failed, when the read failed
  // (the session is aborted then).
  bool read_straight_locked(int peer, void* dst, uint64_t address, size_t bytes, Done& done);
  // Checks a frame from `peer` against the message it belongs to; aborts the
  // session and fails everything when the sender wrote nonsense.
  bool frame_ok_locked(int peer, const FrameHeader& h, Done& done);
  // Aborts the group, saying `what` the peer wrote, and fails everything pending.
  void corrupt_channel_locked(const std::string& what, Done& done);
  bool push_sends_locked(int peer, Done& done);
  bool pull_frames_locked(int peer, Done& done);
  // Sending side: completes the streamed sends `peer` has judged, each with
  // the refusal its notice carried, if any.
  bool take_verdicts_locked(int peer, Done& done);
  void take_notices_locked(int peer);
  // Receiving side: leaves `sender` the refusals it has not yet read and
  // publishes how many of its messages are judged; true if it wrote anything.
  bool publish_verdicts_locked(int sender);
  // Starts a new message from `peer` (its first frame's header); false while
  // it is held in the channel for its receive (see kHoldNs in the .cpp).
  bool begin_message_locked(int peer, const FrameHeader& h, Done& done);
  // How long a thread with nothing to do may sleep: until a held message is
  // due to be taken as unexpected, at most the sleep slice.
  uint64_t sleep_ns_locked() const;
  // Matches a just-posted receive against what already arrived.
  bool match_unexpected_locked(const P2PHandle& op, Done& done);
  // Whether `recv` may take a message of `h`'s size and type; if not, fails it
  // and queues a notice for the sender.
  // tell_sender: false for a message taken into a buffer before its receive
  // (its send completed when it was judged).
  bool accept_locked(const P2PHandle& recv, int source, uint64_t message, size_t total,
                     uint32_t type, Done& done, bool tell_sender = true);
  void finish_locked(const P2PHandle& op, std::exception_ptr err, Done& done);
  void help_locked(const P2PHandle& op);
  void wake_helper_locked();
  // Helped operations, or refusals still to leave, and no thread in wait().
  bool helper_has_work_locked() const;
  // Deadlines, a dead peer, the session's abort: fails what must fail.
  void check_health_locked(Done& done);
  // Fails every pending operation: `culprit` with `culprit_why`, the others
  // with the session's abort (the caller aborted it).
  void fail_all_locked(const std::string& culprit_why, Done& done, const P2POp* culprit = nullptr);
  // Removes every pending operation from the queues, and returns them.
  std::vector<P2PHandle> take_pending_locked();
  static void complete(Done& done);  // runs on_done, outside mu_

  std::string describe(const P2POp& op) const;
  // "rank R: " and describe(op): how a failure of op names it.
  std::string on_this_rank(const P2POp& op) const;
  void helper_loop();

  P2PChannels& ch_;
  Session& session_;
  TypeName type_name_;
  ThreadTeam* team_;
  const CrossMemory* cma_;
  const size_t straight_min_bytes_;
  const int rank_;
  const int world_;

  std::mutex mu_;
  std::condition_variable helper_cv_;
  std::vector<std::deque<P2PHandle>> sends_;  // per peer, in post order; the front streams
  std::vector<std::deque<P2PHandle>> unjudged_;  // per peer: streamed sends awaiting their verdict
  std::list<P2PHandle> recvs_;                // posted, unmatched, in post order
  std::vector<Incoming> incoming_;            // per peer
  std::vector<std::deque<std::shared_ptr<Unexpected>>> unexpected_;  // per source, arrival order
  std::vector<uint64_t> next_message_;        // per peer: the number of the next send
  std::vector<uint64_t> held_since_;          // per peer: when its held first frame was seen (0: none)
  uint64_t hold_until_ns_ = 0;                // the earliest held message's due time (0: none)
  uint64_t arrivals_ = 0;  // unexpected messages so far: their order across sources
  size_t outstanding_ = 0;  // posted, not yet complete
  size_t helped_ = 0;       // of those, the ones the helper drives when nobody waits (see post)
  int waiters_ = 0;         // threads in wait(): the helper stays off while any drives
  uint64_t next_liveness_ns_ = 0;
  // Receiving side, per sender: messages judged so far, the count published
  // (ChannelControl::judged), and refusals not yet left on its notice line
  // (one at a time: the sender reads each before the next), oldest first.
  struct Refusal {
    uint64_t message;
    std::string why;
  };
  std::vector<uint64_t> judged_;
  std::vector<uint64_t> published_;
  std::vector<std::deque<Refusal>> refusals_;
  size_t refusals_waiting_ = 0;  // entries in refusals_, all senders
  bool closing_ = false;
  std::thread helper_;
};

}  // namespace pycomm::core
