#include <gtest/gtest.h>

#include "config/did_you_mean.h"
#include "config/key_decl.h"

namespace primus::config {
namespace {

TEST(ConfigDidYouMean, SuggestsTyposTranspositionsAndMissingSections) {
  const std::vector<std::string> names = megatron_keys().names();
  auto first = [&](const std::string& w) {
    auto s = did_you_mean(w, names);
    return s.empty() ? std::string() : s.front();
  };
  EXPECT_EQ(first("trian_iters"), "train_iters");
  EXPECT_EQ(first("micro_batchsize"), "micro_batch_size");
  EXPECT_EQ(first("tensor_model_parallel_sizes"), "tensor_model_parallel_size");
  EXPECT_EQ(first("Global_Batch_Size"), "global_batch_size");
  EXPECT_EQ(first("lr-warmup-iters"), "lr_warmup_iters");
  EXPECT_TRUE(did_you_mean("completely_unrelated_thing", names).empty());

  const std::vector<std::string> tt = torchtitan_keys().names();
  EXPECT_EQ(did_you_mean("training.seqlen", tt).front(), "training.seq_len");
  EXPECT_EQ(did_you_mean("local_batch_size", tt).front(), "training.local_batch_size");
  EXPECT_TRUE(did_you_mean("zzz.qqq", tt).empty());
}

TEST(ConfigDidYouMean, TextAndEditDistance) {
  EXPECT_EQ(edit_distance("abc", "acb"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(did_you_mean_text("--dryrun", {"--dry-run", "--config"}), "; did you mean '--dry-run'?");
  EXPECT_EQ(did_you_mean_text("xyz", {"--dry-run"}), "");
  EXPECT_EQ(did_you_mean_text("ab", {"abc", "abd"}), "; did you mean 'abc' or 'abd'?");
}

}  // namespace
}  // namespace primus::config
