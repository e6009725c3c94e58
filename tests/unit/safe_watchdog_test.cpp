// The hang watchdog (safe/hang_watchdog.h): who is stuck, the automatic timeout, and detection in time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "safe/hang_watchdog.h"

using namespace primus::safe;

namespace {
Heartbeat beat(int rank, int64_t step, uint64_t colls) {
  Heartbeat b;
  b.rank = rank;
  b.step = step;
  b.collectives = colls;
  return b;
}
}  // namespace

TEST(SafeWatchdog, NamesTheRankBehindTheOthers) {
  // Rank 2 stopped before the collective the others entered.
  auto s = stuck_ranks({beat(0, 4, 5), beat(1, 4, 5), beat(2, 4, 4), beat(3, 4, 5)});
  ASSERT_EQ(s, std::vector<int>({2}));
  // A rank a whole step behind.
  EXPECT_EQ(stuck_ranks({beat(0, 9, 10), beat(1, 8, 12)}), std::vector<int>({1}));
  // Everyone at the same point: all named.
  EXPECT_EQ(stuck_ranks({beat(0, 4, 5), beat(1, 4, 5)}), std::vector<int>({0, 1}));
  // A rank without a heartbeat comes first.
  Heartbeat m = beat(1, 0, 0);
  m.missing = true;
  EXPECT_EQ(stuck_ranks({beat(0, 4, 5), m}), std::vector<int>({1}));
  const std::string d = describe_hang({beat(0, 4, 5), beat(1, 4, 4)}, {1});
  EXPECT_NE(d.find("stuck rank(s): 1"), std::string::npos);
}

TEST(SafeWatchdog, AutomaticTimeout) {
  WatchdogOptions o;
  o.dir =
      (std::filesystem::temp_directory_path() / (std::string("primus-wd-auto-") + std::to_string(getpid())))
          .string();
  HangWatchdog w(o);
  EXPECT_DOUBLE_EQ(w.timeout_s(), 600);  // before the first step: the startup timeout
  for (int i = 1; i <= 10; ++i) w.progress(i, 1000);
  EXPECT_DOUBLE_EQ(w.timeout_s(), 600);  // between steps (evaluation, checkpoints): the long limit
  w.set_phase("step 11", /*in_step=*/true);
  EXPECT_DOUBLE_EQ(w.timeout_s(), 60);  // max(3 x 1 s, 60 s)
  w.progress(11, 40000);
  w.set_phase("step 12", true);
  EXPECT_DOUBLE_EQ(w.timeout_s(), 120);  // 3 x p99 (40 s)
  o.hang_timeout_s = 7;
  HangWatchdog fixed(o);
  fixed.set_phase("step 1", true);
  EXPECT_DOUBLE_EQ(fixed.timeout_s(), 7);
  fixed.set_phase("evaluation", false);
  EXPECT_DOUBLE_EQ(fixed.timeout_s(), 600);
}

TEST(SafeWatchdog, DetectsAStallWithinTheTimeout) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / (std::string("primus-wd-stall-") + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(dir);
  std::atomic<int> fired{0};
  std::vector<int> who;
  WatchdogOptions o;
  o.dir = dir;
  o.hang_timeout_s = 1.0;
  o.poll_s = 0.05;
  o.on_hang = [&](const std::vector<int>& stuck, const std::string& msg) {
    if (fired++ == 0) who = stuck;
  };
  HangWatchdog w(o);
  w.start();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= 5; ++i) {
    w.set_phase("step " + std::to_string(i), true);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    w.progress(i, 20);
  }
  w.set_phase("step 6", true);  // progress stops inside step 6
  while (fired.load() == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  w.stop();
  ASSERT_GE(fired.load(), 1);
  EXPECT_GE(s, 1.0);  // never before the timeout
  // Timeout + the last steps + the decision delay (one 50 ms poll when idle); the rest is room for a loaded
  // 2-core machine (ctest -j2 beside builds), where the watchdog thread can wait seconds for a core.
  EXPECT_LT(s, 1.0 + 0.1 + 10.0);
  EXPECT_EQ(who, std::vector<int>({0}));
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank-0.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/hang-rank-0.json"));
  std::filesystem::remove_all(dir);
}

// The straggler measure takes the device's own-work time when the trainer supplies marks (host times cannot
// tell a slow GPU: the host enqueues ahead), and falls back to host times when a mark is missing.
TEST(SafeWatchdog, StragglerMeasureUsesDeviceMarks) {
  struct FakeMarks : StepMarks {
    int starts = 0, firsts = 0;
    double own = 42.0;
    void step_start() override { ++starts; }
    void first_collective() override { ++firsts; }
    double own_ms() override { return own; }
  };
  WatchdogOptions o;
  o.dir =
      (std::filesystem::temp_directory_path() / (std::string("primus-wd-marks-") + std::to_string(getpid())))
          .string();
  o.poll_s = 0.01;
  o.hang_timeout_s = 1000;
  o.on_hang = [](const std::vector<int>&, const std::string&) {};
  auto window_ms = [&](HangWatchdog& w) {
    for (int i = 0; i < 200; ++i) {  // the watchdog thread writes the heartbeat within a poll
      std::vector<Heartbeat> b = w.read_all();
      if (!b.empty() && !b[0].missing && b[0].step == 3) return b[0].window_ms;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1.0;
  };
  FakeMarks m;
  {
    HangWatchdog w(o);
    w.set_step_marks(&m);
    w.start();
    for (int i = 1; i <= 3; ++i) {
      w.set_phase("step", true);
      w.collective("grads bucket 1");
      w.collective("grads bucket 2");
      w.progress(i, 500);
    }
    EXPECT_EQ(m.starts, 3);
    EXPECT_EQ(m.firsts, 3);  // only each step's first collective
    EXPECT_DOUBLE_EQ(window_ms(w), 42.0);
    w.stop();
  }
  std::filesystem::remove_all(o.dir);
  m.own = std::nan("");  // not measured: the host's own time (microseconds here), not 42
  {
    HangWatchdog w(o);
    w.set_step_marks(&m);
    w.start();
    for (int i = 1; i <= 3; ++i) {
      w.set_phase("step", true);
      w.collective("grads");
      w.progress(i, 500);
    }
    const double ms = window_ms(w);
    EXPECT_GE(ms, 0.0);
    EXPECT_LT(ms, 42.0);
    w.stop();
  }
  std::filesystem::remove_all(o.dir);
}
