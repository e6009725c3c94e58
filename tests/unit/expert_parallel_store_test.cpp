// Expert parallelism's parameter layout (model/param_store.h, parallel/split_state.h) on the CPU: each ep
// rank's store holds its experts in regions after the head, initialised bitwise as that slice of the one-rank
// model; the rest of the model is the same on every rank; a whole-model store split into shares and put back
// together is the original; sharded (ZeRO-1, FSDP) allocation pads expert regions for expert-dp; the model
// checks that the store matches the expert split; a split that does not divide the experts is refused.
#include <gtest/gtest.h>

#include <cstring>

#include "comm/communicator.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "parallel/split_state.h"
#include "unit/model_grad_util.h"

using namespace primus;

namespace {

ModelConfig micro_moe() {
  ModelConfig m = grad_test::tiny_model(/*qk_norm=*/false, /*qkv_bias=*/false, /*tied=*/false);
  m.num_layers = 3;
  m.moe.num_experts = 4;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 8;
  m.moe.layer_is_moe = {1, 0, 1};
  m.moe.expert_bias = true;
  return m;
}

std::vector<float> values(ParamStore& p, const std::string& name) {
  return p.param(name).to_vector<float>();
}

}  // namespace

TEST(ExpertParallelStore, SharesInitialiseAsSlicesOfTheWholeModel) {
  const ModelSpec whole_spec = ModelSpec::from_config(micro_moe());
  ParamStore whole(whole_spec);
  whole.allocate(DType::kF32, Stream::cpu());
  whole.initialize(7, Stream::cpu());
  EXPECT_EQ(whole.regions().size(), 5u);  // embedding, 3 layers, head: no expert regions at ep 1
  for (int rank = 0; rank < 2; ++rank) {
    ParamStore share(whole_spec.with_expert_shard(2, rank));
    share.allocate(DType::kF32, Stream::cpu());
    share.initialize(7, Stream::cpu());
    ASSERT_EQ(share.hook_regions(), 5);
    ASSERT_EQ(share.regions().size(), 7u);  // + one region per MoE layer
    for (int r = 0; r < 7; ++r) EXPECT_EQ(share.regions()[r].experts, r >= 5) << r;
    for (const ParamEntry& e : share.entries()) {
      const std::vector<float> mine = values(share, e.name), all = values(whole, e.name);
      const bool expert = share.regions()[e.region].experts;
      ASSERT_EQ(mine.size() * (expert ? 2 : 1), all.size()) << e.name;
      const size_t first = expert ? rank * mine.size() : 0;
      EXPECT_EQ(0, std::memcmp(mine.data(), all.data() + first, mine.size() * sizeof(float))) << e.name;
      EXPECT_EQ(expert, e.name.find(".experts.") != std::string::npos) << e.name;
    }
  }
}

TEST(ExpertParallelStore, ShareAndCopyRoundTripTheWholeModelState) {
  const ModelSpec spec = ModelSpec::from_config(micro_moe());
  ParamStore whole(spec);
  whole.allocate(DType::kF32, Stream::cpu());
  whole.initialize(3, Stream::cpu());
  // Distinct moments, so that a mix-up between m, v and the master shows.
  std::vector<float> m(whole.total_numel()), v(whole.total_numel());
  for (size_t i = 0; i < m.size(); ++i) {
    m[i] = 0.001f * static_cast<float>(i);
    v[i] = 2.0f + 0.001f * static_cast<float>(i);
  }
  whole.adam_m_flat().copy_from(Tensor::from_vector(m, {whole.total_numel()}), Stream::cpu());
  whole.adam_v_flat().copy_from(Tensor::from_vector(v, {whole.total_numel()}), Stream::cpu());
  for (int rank = 0; rank < 4; ++rank) {
    ParamStore share(spec.with_expert_shard(4, rank));
    share.allocate(DType::kF32, Stream::cpu());
    parallel::take_split_share(whole, share);
    ParamStore copy(spec.with_expert_shard(4, rank));
    copy.allocate(DType::kBF16, Stream::cpu(), DType::kF32, MasterStorage::kRemainders);
    parallel::copy_param_state(share, copy, Stream::cpu());
    for (int i = 0; i < static_cast<int>(share.entries().size()); ++i) {
      const ParamEntry& e = share.entry(i);
      const int j = whole.find(e.name);
      const int64_t first = share.regions()[e.region].experts ? rank * e.numel : 0;
      const Tensor w = whole.master(j).flatten().slice(first, first + e.numel);
      EXPECT_EQ(copy.master_f32(i, Stream::cpu()).flatten().to_vector<float>(), w.to_vector<float>())
          << e.name;
      const int64_t at = whole.entry(j).offset + first;
      EXPECT_EQ(copy.adam_m_flat().slice(e.offset, e.offset + e.numel).to_vector<float>(),
                std::vector<float>(m.begin() + at, m.begin() + at + e.numel))
          << e.name;
      EXPECT_EQ(copy.adam_v_flat().slice(e.offset, e.offset + e.numel).to_vector<float>(),
                std::vector<float>(v.begin() + at, v.begin() + at + e.numel))
          << e.name;
    }
  }
}

TEST(ExpertParallelStore, ShardedAllocationPadsExpertRegionsForExpertDp) {
  const ModelSpec spec = ModelSpec::from_config(micro_moe()).with_expert_shard(2, 1);
  ParamStore p(spec, /*region_multiple=*/4, /*expert_region_multiple=*/2);
  p.allocate_sharded(DType::kF32, Stream::cpu(), ShardMode::kOptimizer, 4, 3, 2, 1);
  for (int r = 0; r < static_cast<int>(p.regions().size()); ++r) {
    const bool expert = p.regions()[r].experts;
    EXPECT_EQ(p.region_ranks(r), expert ? 2 : 4) << r;
    EXPECT_EQ(p.region_rank(r), expert ? 1 : 3) << r;
    EXPECT_EQ(p.chunk_len(r) * p.region_ranks(r), p.region_len(r)) << r;
  }
  // FSDP shards the expert regions over expert-dp as well; each region's chunk is its own.
  ParamStore f(spec, 4, 2);
  f.allocate_sharded(DType::kF32, Stream::cpu(), ShardMode::kFull, 4, 2, 2, 0);
  int64_t total = 0;
  for (int r = 0; r < static_cast<int>(f.regions().size()); ++r) total += f.chunk_len(r);
  EXPECT_EQ(f.shard_total(), total);
  EXPECT_EQ(f.master_flat().numel(), total);
}

TEST(ExpertParallelStore, TheSplitMustDivideTheExpertsAndMatchTheStore) {
  const ModelSpec spec = ModelSpec::from_config(micro_moe());
  EXPECT_THROW(spec.with_expert_shard(3, 0), Error);  // 4 experts over 3 ranks
  EXPECT_THROW(spec.with_expert_shard(2, 2), Error);  // rank outside the split
  ModelConfig dense = micro_moe();
  dense.moe = MoeConfig{};
  EXPECT_THROW(ModelSpec::from_config(dense).with_expert_shard(2, 0), Error);
  // The model takes its expert split from the store it is given.
  ParamStore share(spec.with_expert_shard(2, 1));
  share.allocate(DType::kF32, Stream::cpu());
  RecomputeConfig rc;
  LlamaModel model(micro_moe(), rc, share, Stream::cpu(), 16);
  EXPECT_EQ(model.spec().ep.size, 2);
  EXPECT_EQ(model.spec().first_local_expert(), 2);
  // An expert-parallel group of the wrong size is refused by every MoE layer.
  EXPECT_THROW(model.set_expert_groups(nullptr, nullptr), Error);
}
