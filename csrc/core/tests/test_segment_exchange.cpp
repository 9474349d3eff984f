// Anonymous segments (sealed memfds) and their exchange over an abstract Unix
// socket: what a peer gets with the secret or its token, what it is refused
// without (across processes and users too), that strangers who connect and
// say nothing delay nobody, deadlines, and that servers leave nothing behind:
// no fd, no thread, no file in /dev/shm.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../errors.h"
#include "../transport/segment_exchange.h"
#include "../transport/session.h"
#include "../transport/sha256.h"
#include "../transport/shm_segment.h"
#include "check.h"

using namespace pycomm::core;

namespace {

constexpr size_t kBytes = 1 << 20;

uint64_t in_seconds(double s) { return monotonic_ns() + uint64_t(s * 1e9); }

// The message of the E that fn throws, or "" (and a failed check) if it throws none.
template <class E, class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "  threw another type: %s\n", e.what());
    ++pycomm::testing::failures();
    return "";
  }
  std::fprintf(stderr, "  threw nothing\n");
  ++pycomm::testing::failures();
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  std::fprintf(stderr, "  '%s' lacks '%s'\n", text.c_str(), part.c_str());
  return false;
}

void fill(const ShmSegment& seg) {
  auto* p = static_cast<uint32_t*>(seg.data());
  for (size_t i = 0; i < seg.size() / 4; ++i) p[i] = uint32_t(i * 2654435761u);
}

bool has_pattern(const ShmSegment& seg) {
  const auto* p = static_cast<const uint32_t*>(seg.data());
  for (size_t i = 0; i < seg.size() / 4; ++i) {
    if (p[i] != uint32_t(i * 2654435761u)) return false;
  }
  return true;
}

// A server offering one patterned segment under kSessionKey.
struct Served {
  std::string address = server_address(new_group_id());
  GroupSecret secret = new_group_secret();
  ShmSegment seg = ShmSegment::create_anonymous("test-exchange", kBytes);
  SegmentServer server{address, secret};
  Served() {
    fill(seg);
    server.offer(kSessionKey, seg.fd());
  }
  ShmSegment fetch(const GroupSecret& s, uint64_t key = kSessionKey, double timeout_s = 5) {
    return ShmSegment::from_fd(fetch_segment(address, s, key, 1, in_seconds(timeout_s), "test"), "test segment");
  }
};

size_t entries_in(const char* dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir)) {
    while (struct dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

std::set<std::string> pycomm_files_in_dev_shm() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (struct dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, "pycomm-", 7) == 0) names.insert(e->d_name);
    }
    closedir(d);
  }
  return names;
}

std::string slurp(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A socket and the abstract address `address`, for calls that bypass the library.
struct RawSocket {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr {};
  socklen_t len;
  explicit RawSocket(const std::string& address)
      : len(socklen_t(offsetof(struct sockaddr_un, sun_path) + 1 + address.size())) {
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, address.data(), address.size());
  }
  struct sockaddr* sa() { return reinterpret_cast<struct sockaddr*>(&addr); }
};

// A connection that bypasses fetch_segment, to send what it would not.
int connect_raw(const std::string& address) {
  RawSocket s(address);
  CHECK(connect(s.fd, s.sa(), s.len) == 0);
  return s.fd;
}

constexpr size_t kRequestBytes = 56;  // the protocol's request

// Sends `bytes` of zeros and returns all the server answers, as text.
std::string raw_exchange(const std::string& address, size_t bytes) {
  int fd = connect_raw(address);
  std::string zeros(bytes, '\0'), reply;
  CHECK(send(fd, zeros.data(), zeros.size(), MSG_NOSIGNAL) == ssize_t(bytes));
  shutdown(fd, SHUT_WR);  // the end of the request: a short one is seen at once
  char buf[256];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) reply.append(buf, size_t(n));
  close(fd);
  return reply;
}

// A child process that waits for a go byte, runs fn, writes fn's text back
// and exits: forked before the parent starts any thread.
struct Child {
  pid_t pid = -1;
  int go[2], result[2];

  template <class Fn>
  explicit Child(Fn fn) {
    if (pipe(go) != 0 || pipe(result) != 0) throw std::runtime_error("pipe");
    // Else the child may print this process's unflushed lines again (as
    // ThreadSanitizer's _exit does).
    std::fflush(nullptr);
    pid = fork();
    if (pid == 0) {
      char b;
      std::string text;
      if (read(go[0], &b, 1) == 1) {
        try {
          text = fn();
        } catch (const std::exception& e) {
          text = std::string("exception: ") + e.what();
        }
      }
      ssize_t w = write(result[1], text.data(), text.size());
      (void)w;
      _exit(0);
    }
    close(go[0]);
    close(result[1]);
  }

  std::string run() {
    char b = 1;
    if (write(go[1], &b, 1) != 1) return "no go";
    close(go[1]);
    std::string text;
    char buf[512];
    for (ssize_t n; (n = read(result[0], buf, sizeof(buf))) > 0;) text.append(buf, size_t(n));
    close(result[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return text;
  }
};

}  // namespace

TEST(memfd_path_is_available_here) { CHECK(memfd_unavailable_reason().empty()); }

TEST(anonymous_segment_is_served_fetched_and_shared) {
  Served s;
  CHECK(s.seg.fd() >= 0);
  CHECK(s.seg.fd() >= 0);
  CHECK(s.seg.name().empty());
  CHECK(slurp("/proc/self/maps").find("/memfd:pycomm-test-exchange (deleted)") != std::string::npos);

  ShmSegment got = s.fetch(s.secret);
  CHECK(got.fd() >= 0);
  CHECK_EQ(got.size(), kBytes);
  CHECK(got.data() != s.seg.data());  // a mapping of its own, of the same pages
  CHECK(has_pattern(got));
  static_cast<uint32_t*>(got.data())[7] = 0xfeedbeef;
  CHECK_EQ(static_cast<uint32_t*>(s.seg.data())[7], 0xfeedbeefu);
  static_cast<uint32_t*>(s.seg.data())[kBytes / 4 - 1] = 0xabad1dea;
  CHECK_EQ(static_cast<uint32_t*>(got.data())[kBytes / 4 - 1], 0xabad1deau);
  CHECK_EQ(s.server.refused(), 0u);

  // Moving hands over the fd and the mapping; the moved-from segment holds neither.
  ShmSegment moved = std::move(got);
  CHECK_EQ(got.fd(), -1);
  CHECK(got.data() == nullptr);
  CHECK_EQ(static_cast<uint32_t*>(moved.data())[7], 0xfeedbeefu);
}

TEST(received_segment_is_sealed) {
  Served s;
  ShmSegment got = s.fetch(s.secret);
  CHECK(ftruncate(got.fd(), 4096) != 0);                 // F_SEAL_SHRINK
  CHECK(ftruncate(got.fd(), off_t(2 * kBytes)) != 0);    // F_SEAL_GROW
  CHECK(fcntl(got.fd(), F_ADD_SEALS, F_SEAL_WRITE) != 0);  // F_SEAL_SEAL
  struct stat st;
  CHECK(fstat(got.fd(), &st) == 0 && size_t(st.st_size) == kBytes);
  CHECK(fcntl(got.fd(), F_GETFD) & FD_CLOEXEC);
}

TEST(wrong_secret_is_refused_and_the_right_one_still_served) {
  Served s;
  GroupSecret wrong = s.secret;
  wrong[31] ^= 1;
  const std::string msg = error_of<CommError>([&] { s.fetch(wrong); });
  CHECK(contains(msg, "test: refused by the peer: wrong group secret"));
  CHECK_EQ(s.server.refused(), 1u);
  CHECK(has_pattern(s.fetch(s.secret)));
  CHECK_EQ(s.server.refused(), 1u);
}

TEST(unknown_or_withdrawn_key_is_refused) {
  Served s;
  CHECK(contains(error_of<CommError>([&] { s.fetch(s.secret, channel_key(3)); }),
                 "refused by the peer: no segment offered under key 4"));
  s.server.withdraw(kSessionKey);
  CHECK(contains(error_of<CommError>([&] { s.fetch(s.secret); }), "no segment offered under key 0"));
  CHECK_EQ(s.server.refused(), 2u);
  s.server.offer(kSessionKey, s.seg.fd());
  CHECK(has_pattern(s.fetch(s.secret)));
}

TEST(from_fd_refuses_what_is_not_a_sealed_memfd) {
  int plain = memfd_create("plain", MFD_CLOEXEC);
  CHECK(ftruncate(plain, 4096) == 0);
  CHECK(contains(error_of<CommError>([&] { ShmSegment::from_fd(plain, "rank 1's channel"); }),
                 "rank 1's channel: the memfd received is not sealed against shrinking"));
  int p[2];
  CHECK(pipe2(p, O_CLOEXEC) == 0);
  close(p[1]);
  CHECK(contains(error_of<CommError>([&] { ShmSegment::from_fd(p[0], "rank 2's session"); }),
                 "rank 2's session: the file descriptor received is not a memfd"));
  int empty = memfd_create("empty", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CHECK(fcntl(empty, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  CHECK(contains(error_of<CommError>([&] { ShmSegment::from_fd(empty, "x"); }), "x: the memfd received has size 0"));
  // from_fd owned (and closed) all three.
  CHECK(fcntl(plain, F_GETFD) < 0 && fcntl(p[0], F_GETFD) < 0 && fcntl(empty, F_GETFD) < 0);
  CHECK(contains(error_of<InvalidArgument>([] { ShmSegment::create_anonymous("t", 0); }), "bytes"));
}

TEST(another_process_gets_the_memory_only_with_the_secret) {
  // Forked while this process has one thread; the server starts after.
  const std::string address = server_address(new_group_id());
  const GroupSecret secret = new_group_secret();
  GroupSecret wrong = new_group_secret();
  Child child([&]() -> std::string {
    std::string out;
    try {
      fetch_segment(address, wrong, kSessionKey, 1, in_seconds(5), "child");
      out = "wrong secret accepted;";
    } catch (const CommError& e) {
      out = std::string(e.what()) + ";";
    }
    ShmSegment seg = ShmSegment::from_fd(fetch_segment(address, secret, kSessionKey, 1, in_seconds(5), "child"),
                                         "child's segment");
    out += has_pattern(seg) ? "pattern;" : "no pattern;";
    static_cast<uint32_t*>(seg.data())[1] = 0xc0ffee;
    return out;
  });
  ShmSegment seg = ShmSegment::create_anonymous("cross-process", kBytes);
  fill(seg);
  SegmentServer server(address, secret);
  server.offer(kSessionKey, seg.fd());
  const std::string out = child.run();
  CHECK(contains(out, "child: refused by the peer: wrong group secret;pattern;"));
  CHECK_EQ(server.refused(), 1u);
  CHECK_EQ(static_cast<uint32_t*>(seg.data())[1], 0xc0ffeeu);
}

// The server's count of refused connections once it reaches `n` or a second
// has passed: its thread counts a refusal after the peer may have seen it.
static uint64_t refusals_within_a_second(const SegmentServer& server, uint64_t n) {
  for (int i = 0; i < 200 && server.refused() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return server.refused();
}

TEST(a_server_of_another_user_is_not_sent_the_secret) {
  if (geteuid() != 0) {
    std::printf("  (skipped: needs root to run a child as another user)\n");
    return;
  }
  const std::string address = server_address(new_group_id());
  const GroupSecret secret = new_group_secret();
  Child child([&]() -> std::string {
    if (setuid(65534) != 0) return "setuid failed";
    fetch_segment(address, secret, kSessionKey, 1, in_seconds(5), "nobody");
    return "served";
  });
  ShmSegment seg = ShmSegment::create_anonymous("other-user", 4096);
  SegmentServer server(address, secret);
  server.offer(kSessionKey, seg.fd());
  CHECK(contains(child.run(), "runs as uid 0, not 65534; the group secret is not sent to it"));
  // Its connection, as another user's (it never sent a request), counted by the
  // server's thread, maybe after the child has already given up on the server.
  CHECK_EQ(refusals_within_a_second(server, 1), 1u);
}

TEST(a_client_of_another_user_is_refused) {
  if (geteuid() != 0) {
    std::printf("  (skipped: needs root to run a child as another user)\n");
    return;
  }
  const std::string address = server_address(new_group_id());
  // The child skips fetch_segment's own check and asks anyway.
  Child child([&]() -> std::string {
    if (setuid(65534) != 0) return "setuid failed";
    return raw_exchange(address, kRequestBytes);
  });
  ShmSegment seg = ShmSegment::create_anonymous("other-user", 4096);
  SegmentServer server(address, new_group_secret());
  server.offer(kSessionKey, seg.fd());
  CHECK(contains(child.run(), "the client runs as uid 65534, not 0"));
  CHECK_EQ(refusals_within_a_second(server, 1), 1u);
}

// Another user's silent connections are closed as soon as they are accepted,
// before a byte of theirs is read: they hold nothing up.
TEST(another_users_silent_connections_are_dropped_at_once) {
  if (geteuid() != 0) {
    std::printf("  (skipped: needs root to run a child as another user)\n");
    return;
  }
  Served s;
  constexpr int kSilent = 16;
  int ready[2];
  CHECK(pipe(ready) == 0);
  const pid_t child = fork();
  if (child == 0) {
    if (setuid(65534) != 0) _exit(1);
    std::vector<int> held;
    for (int i = 0; i < kSilent; ++i) held.push_back(connect_raw(s.address));
    if (write(ready[1], "x", 1) != 1) _exit(1);
    pause();  // holds them, saying nothing, until killed
    _exit(0);
  }
  char b;
  CHECK(read(ready[0], &b, 1) == 1);
  const uint64_t t0 = monotonic_ns();
  CHECK(has_pattern(s.fetch(s.secret)));
  CHECK(double(monotonic_ns() - t0) * 1e-9 < 0.5);  // not SegmentServer::kRequestWaitNs
  CHECK_EQ(refusals_within_a_second(s.server, kSilent), uint64_t(kSilent));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
}

TEST(a_request_of_another_protocol_is_refused) {
  Served s;
  CHECK(contains(raw_exchange(s.address, kRequestBytes), "not a request of this pycomm (magic 0, version 0"));
  CHECK_EQ(s.server.refused(), 1u);
  CHECK(raw_exchange(s.address, 20).empty());  // too short: dropped at the end of the stream, unanswered
  CHECK_EQ(s.server.refused(), 1u);
  CHECK(has_pattern(s.fetch(s.secret)));
}

// A socket that listens and never answers: what a dead rank's address is when
// a child it forked still holds it. The caller's check ends the wait early.
TEST(a_server_that_never_answers_is_given_up_when_the_caller_says) {
  const std::string address = server_address(new_group_id());
  RawSocket s(address);
  CHECK(bind(s.fd, s.sa(), s.len) == 0);
  CHECK(listen(s.fd, 4) == 0);
  const uint64_t t0 = monotonic_ns();
  const std::string msg = error_of<CommError>([&] {
    fetch_segment(address, new_group_secret(), 0, 1, in_seconds(20), "rank 1", [&] {
      if (monotonic_ns() - t0 > 100'000'000) throw CommError("rank 1: the owner exited");
    });
  });
  const double elapsed = double(monotonic_ns() - t0) * 1e-9;
  CHECK(contains(msg, "the owner exited"));
  CHECK(elapsed < 2.0);  // not the 20 s deadline
  ::close(s.fd);
}

// pycomm offers before it publishes, so nobody listening means a peer that is
// gone: the answer comes at once, not at the deadline.
TEST(no_server_is_an_error_at_once) {
  const std::string address = server_address(new_group_id());
  const uint64_t t0 = monotonic_ns();
  const std::string msg =
      error_of<CommError>([&] { fetch_segment(address, new_group_secret(), 0, 1, in_seconds(5), "rank 1"); });
  const double elapsed = double(monotonic_ns() - t0) * 1e-9;
  CHECK(contains(msg, "pycomm.CommError: rank 1: no server at " + address + " (Connection refused)"));
  CHECK(elapsed < 1.0);  // a loose bound: the host may be busy
}

// Connections are served side by side: clients of this user that connect and
// say nothing (more of them than the server keeps) delay nobody.
TEST(silent_clients_do_not_stop_the_server) {
  auto s = std::make_unique<Served>();
  std::vector<int> silent;
  for (size_t i = 0; i < SegmentServer::kMaxPending + 8; ++i) silent.push_back(connect_raw(s->address));
  const uint64_t t0 = monotonic_ns();
  CHECK(has_pattern(s->fetch(s->secret, kSessionKey, 10)));
  CHECK(double(monotonic_ns() - t0) * 1e-9 < 0.5);  // not SegmentServer::kRequestWaitNs
  CHECK_EQ(s->server.refused(), 0u);  // dropped unanswered, not counted

  // Closing does not wait out a silent client's time either.
  const uint64_t t1 = monotonic_ns();
  s.reset();
  CHECK(double(monotonic_ns() - t1) * 1e-9 < 0.5);
  for (int fd : silent) close(fd);
}

TEST(a_taken_address_is_refused) {
  Served s;
  CHECK(contains(error_of<CommError>([&] { SegmentServer again(s.address, s.secret); }), "another socket holds it"));
  CHECK(has_pattern(s.fetch(s.secret)));
}

TEST(servers_leave_no_fds_or_threads_behind) {
  const size_t fds = entries_in("/proc/self/fd"), threads = entries_in("/proc/self/task");
  const GroupSecret secret = new_group_secret();
  ShmSegment seg = ShmSegment::create_anonymous("many", 4096);
  const size_t fds_with_seg = entries_in("/proc/self/fd");
  for (int i = 0; i < 200; ++i) {
    SegmentServer server(server_address(new_group_id()), secret);
    server.offer(kSessionKey, seg.fd());
    if (i % 20 == 0) {
      ShmSegment got = ShmSegment::from_fd(fetch_segment(server.address(), secret, kSessionKey, 1, in_seconds(5), "t"),
                                           "t");
      CHECK_EQ(got.size(), size_t(4096));
    }
  }
  CHECK_EQ(entries_in("/proc/self/fd"), fds_with_seg);
  seg = ShmSegment();
  CHECK_EQ(entries_in("/proc/self/fd"), fds);
  // A joined thread may stay listed a moment while the kernel reaps it.
  for (int i = 0; i < 100 && entries_in("/proc/self/task") != threads; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK_EQ(entries_in("/proc/self/task"), threads);
}

TEST(nothing_appears_in_dev_shm) {
  const auto before = pycomm_files_in_dev_shm();
  {
    Served s;
    ShmSegment got = s.fetch(s.secret);
    CHECK(has_pattern(got));
    CHECK(memfd_unavailable_reason().empty());
  }
  // Other programs on this host may make pycomm segments meanwhile: only a
  // name of this process's pid, or one with no pid, would be ours.
  const std::string ours = "pycomm-" + std::to_string(getpid()) + "-";
  for (const std::string& name : pycomm_files_in_dev_shm()) {
    if (before.count(name)) continue;
    const bool of_another = std::isdigit(static_cast<unsigned char>(name[7])) && name.rfind(ours, 0) != 0;
    if (!of_another) std::fprintf(stderr, "  new in /dev/shm: %s\n", name.c_str());
    CHECK(of_another);
  }
}

TEST(secrets_ids_and_addresses) {
  const GroupSecret s = new_group_secret();
  CHECK(s != new_group_secret());
  CHECK(secret_from_hex(secret_to_hex(s)) == s);
  CHECK_EQ(secret_to_hex(s).size(), size_t(64));
  CHECK(contains(error_of<InvalidArgument>([] { secret_from_hex("abc"); }), "expected 64 hex digits, got 3"));
  CHECK(contains(error_of<InvalidArgument>([] { secret_from_hex(std::string(63, '0') + "g"); }), "position 63"));
  const std::string id = new_group_id();
  CHECK_EQ(id.size(), size_t(32));
  CHECK(id != new_group_id());
  CHECK(server_address(id) == "pycomm-" + id);
  CHECK(contains(error_of<InvalidArgument>([] { server_address("a/b"); }), "id must be 1 to 64 letters"));
}

// FIPS 180-4's examples, and lengths about the padding's block boundary.
TEST(sha256_of_known_messages) {
  auto hex = [](const std::string& m) {
    const Sha256Digest d = sha256(reinterpret_cast<const uint8_t*>(m.data()), m.size());
    GroupSecret g;
    std::memcpy(g.data(), d.data(), g.size());
    return secret_to_hex(g);
  };
  CHECK(hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// The session segment also goes to a rank that shows the token whose digest
// it published, as that rank only; nothing else is had with a token.
TEST(a_rank_token_admits_that_rank_to_the_session_only) {
  Served s;
  const GroupSecret token1 = new_group_secret(), token2 = new_group_secret();
  s.server.admit_members({Sha256Digest{}, token_digest(token1), token_digest(token2)});
  auto fetch_as = [&](const GroupSecret& proof, uint64_t key, int rank) {
    return ShmSegment::from_fd(fetch_segment(s.address, proof, key, rank, in_seconds(5), "rank " + std::to_string(rank)),
                               "test segment");
  };
  CHECK(has_pattern(fetch_as(token1, kSessionKey, 1)));
  CHECK(has_pattern(fetch_as(token2, kSessionKey, 2)));
  CHECK(contains(error_of<CommError>([&] { fetch_as(token1, kSessionKey, 2); }),
                 "rank 2: refused by the peer: wrong token for rank 2"));
  CHECK(contains(error_of<CommError>([&] { fetch_as(token1, kSessionKey, 7); }), "wrong token for rank 7"));
  CHECK(contains(error_of<CommError>([&] { fetch_as(token1, kSessionKey, 0); }), "wrong token for rank 0"));
  // The digest itself, which the store shows anyone, admits nobody.
  const Sha256Digest d = token_digest(token1);
  GroupSecret as_proof;
  std::memcpy(as_proof.data(), d.data(), as_proof.size());
  CHECK(contains(error_of<CommError>([&] { fetch_as(as_proof, kSessionKey, 1); }), "wrong token for rank 1"));
  ShmSegment channel = ShmSegment::create_anonymous("channel", 4096);
  s.server.offer(channel_key(1), channel.fd());
  CHECK(contains(error_of<CommError>([&] { fetch_as(token1, channel_key(1), 1); }), "wrong group secret"));
  CHECK_EQ(s.server.refused(), 5u);
}

// A channel is offered for its one peer: once taken, it is gone, even to
// whoever holds the secret.
TEST(an_offer_for_one_taker_is_withdrawn_once_taken) {
  Served s;
  ShmSegment channel = ShmSegment::create_anonymous("channel", 4096);
  s.server.offer(channel_key(1), channel.fd(), 1);
  CHECK_EQ(s.server.offered(), size_t(2));
  CHECK_EQ(s.fetch(s.secret, channel_key(1)).size(), size_t(4096));
  CHECK_EQ(s.server.offered(), size_t(1));
  CHECK(contains(error_of<CommError>([&] { s.fetch(s.secret, channel_key(1)); }), "no segment offered under key 2"));
}

TEST_MAIN
