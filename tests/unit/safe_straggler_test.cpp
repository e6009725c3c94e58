// Straggler detection and the step-time window (safe/straggler.h).
#include <gtest/gtest.h>

#include "safe/straggler.h"

using namespace primus::safe;

TEST(SafeStraggler, FlagsTheSlowRankOnly) {
  auto f = find_stragglers({100, 101, 99, 130, 100, 102, 98, 100}, 1.2);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rank, 3);
  EXPECT_NEAR(f[0].median_ms, 100, 1e-9);
  EXPECT_NEAR(f[0].score, 100.0 / 130, 1e-9);
  EXPECT_LT(f[0].score, 0.8);
}

TEST(SafeStraggler, NoFalsePositivesOnHealthyNoise) {
  EXPECT_TRUE(find_stragglers({100, 103, 97, 110, 95, 105}, 1.2).empty());
  EXPECT_TRUE(find_stragglers({100}, 1.2).empty());           // one rank: nothing to compare
  EXPECT_TRUE(find_stragglers({100, 0, 0}, 1.2).empty());     // missing ranks are ignored
  EXPECT_EQ(find_stragglers({100, 0, 250}, 1.2).size(), 1u);  // against the other present rank: 100
  // Two ranks, one 1.4x slower: against the other rank it is flagged (against both ranks' median, their mean
  // 96, it would read 1.17x and pass).
  auto two = find_stragglers({80, 112}, 1.2);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].rank, 1);
  EXPECT_NEAR(two[0].median_ms, 80, 1e-9);
  // Sub-millisecond differences are noise however large their ratio (seen on four H200s: 2.9 vs 2.3 ms).
  EXPECT_TRUE(find_stragglers({2.3, 2.3, 2.2, 2.9}, 1.2).empty());
  EXPECT_EQ(find_stragglers({2.3, 2.3, 2.2, 2.9}, 1.2, /*min_excess_ms=*/0.5).size(), 1u);
  EXPECT_EQ(find_stragglers({2.3, 2.3, 2.2, 4.0}, 1.2).size(), 1u);
}

TEST(SafeStraggler, StepWindow) {
  StepWindow w(5);
  EXPECT_EQ(w.median(), 0);
  for (double v : {10.0, 12.0, 11.0, 50.0, 11.0, 12.0, 13.0}) w.add(v);
  EXPECT_NEAR(w.median(), 12, 1e-12);  // last five: 11 50 11 12 13
  EXPECT_NEAR(w.p99(), 50, 1e-12);
  EXPECT_EQ(w.count(), 7u);
}
