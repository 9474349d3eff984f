// A minimal test harness for the native tests: CHECK macros that count
// failures, and TEST cases registered by name. No dependency to install.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace pycomm::testing {

inline int& failures() {
  static int n = 0;
  return n;
}

struct TestCase {
  const char* name;
  std::function<void()> fn;
};

inline std::vector<TestCase>& registry() {
  static std::vector<TestCase> r;
  return r;
}

struct Register {
  Register(const char* name, std::function<void()> fn) { registry().push_back({name, std::move(fn)}); }
};

// Runs every test (or those whose name contains argv[1]); the closing line is
// the plain "N passed, N failed" that CI reads.
inline int run_all(int argc, char** argv) {
  int passed = 0, failed = 0;
  for (const TestCase& t : registry()) {
    if (argc > 1 && std::string(t.name).find(argv[1]) == std::string::npos) continue;
    const int before = failures();
    try {
      t.fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "  unexpected exception: %s\n", e.what());
      ++failures();
    }
    const bool ok = failures() == before;
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", t.name);
    (ok ? passed : failed)++;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

}  // namespace pycomm::testing

#define PYCOMM_CONCAT2(a, b) a##b
#define PYCOMM_CONCAT(a, b) PYCOMM_CONCAT2(a, b)
#define TEST(name)                                                                \
  static void name();                                                             \
  static ::pycomm::testing::Register PYCOMM_CONCAT(reg_, name)(#name, &name);     \
  static void name()

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++::pycomm::testing::failures();                                               \
    }                                                                                \
  } while (0)

#define CHECK_EQ(a, b)                                                                   \
  do {                                                                                   \
    auto va = (a);                                                                       \
    auto vb = (b);                                                                       \
    if (!(va == vb)) {                                                                   \
      std::fprintf(stderr, "  %s:%d: CHECK_EQ failed: %s != %s (%lld vs %lld)\n", __FILE__, \
                   __LINE__, #a, #b, (long long)va, (long long)vb);                      \
      ++::pycomm::testing::failures();                                                   \
    }                                                                                    \
  } while (0)

#define TEST_MAIN \
  int main(int argc, char** argv) { return ::pycomm::testing::run_all(argc, argv); }
