// What ranks compare at start-up (parallel/config_agreement.h): the resolved YAML without its comments (the
// origins there hold paths that may differ between nodes), and the differing lines a rank reports.
#include <gtest/gtest.h>

#include "parallel/config_agreement.h"

using namespace primus::parallel;

TEST(ParallelConfigAgreement, ComparesValuesNotTheirOriginsOrHeaders) {
  const std::string node_a =
      "# Resolved by primus 0.1 from /home/a/exp.yaml\n"
      "model:\n"
      "  seed: 1234                                                # /home/a/exp.yaml:3:3\n"
      "  lr: 0.001   # trailing spaces before the comment\n";
  const std::string node_b =
      "# Resolved by primus 0.1 from /mnt/b/exp.yaml\n"
      "model:\n"
      "  seed: 1234                                                # /mnt/b/exp.yaml:3:3\n"
      "  lr: 0.001   # trailing spaces before the comment\n";
  EXPECT_EQ(config_semantics(node_a), config_semantics(node_b));
  EXPECT_EQ(config_semantics(node_a), "model:\n  seed: 1234\n  lr: 0.001\n");
  EXPECT_TRUE(config_differences(config_semantics(node_a), config_semantics(node_b)).empty());
}

TEST(ParallelConfigAgreement, NamesTheDifferingLines) {
  const std::string rank0 = "a: 1\nseed: 1234\nb: x\nc: 3\n";
  const std::string mine = "a: 1\nseed: 99\nb: x\n";
  const std::vector<std::string> d = config_differences(rank0, mine);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], "seed: 99 (rank 0: seed: 1234)");
  EXPECT_EQ(d[1], "(nothing) (rank 0: c: 3)");
  std::string many_a, many_b;
  for (int i = 0; i < 20; ++i) {
    many_a += "k" + std::to_string(i) + ": 0\n";
    many_b += "k" + std::to_string(i) + ": 1\n";
  }
  EXPECT_EQ(config_differences(many_a, many_b, 6).size(), 6u) << "capped";
}
