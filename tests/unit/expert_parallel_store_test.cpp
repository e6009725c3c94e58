// Expert parallelism's parameter layout (model/param_store.h, parallel/split_state.h) on the CPU: each ep
// rank's store holds its experts in regions after the head, initialised bitwise as that slice of the one-rank
// model; the rest of the model is the same on every rank; a whole-model store split into shares and put back
// together is the original; sharded (ZeRO-1, FSDP) allocation pads expert regions for expert-dp; the model
// checks that the store matches the expert split; a split that does not divide the experts is refused. EP x
// TP: each rank holds its tp columns of its experts, and the shares gather back into the whole model.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "comm/communicator.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "parallel/split_state.h"
#include "unit/model_grad_util.h"
#include "unit/tcp_ranks.h"

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

// EP x TP (expert TP = TP; Megatron's etp x ep grid): rank (tp t, ep j) holds experts [j E / EP, (j + 1) E /
// EP) and of each its F / TP gate rows, up rows and down columns of tp rank t, the rest as under TP alone.
// Its store initialises bitwise as that part of the one-rank model (index arithmetic written out here, not
// read from EntrySlice); the whole state split into the four shares and gathered back over the four ranks (tp
// fastest, as ParallelDims' tp_ep group) is the original, moments included.
TEST(ExpertParallelStore, EpTimesTpSharesHoldTheirColumnsOfTheirExpertsAndGatherBack) {
  constexpr int EP = 2, T = 2;
  ModelConfig cfg = micro_moe();
  cfg.vocab_size = cfg.padded_vocab_size = 24;  // divisible by tp
  const ModelSpec spec = ModelSpec::from_config(cfg);
  const int64_t E = spec.moe.num_experts, Fw = spec.moe.ffn_hidden_size, d = spec.hidden;
  const int64_t El = E / EP, F = Fw / T;
  ParamStore whole(spec);
  whole.allocate(DType::kF32, Stream::cpu());
  whole.initialize(5, Stream::cpu());
  std::vector<float> m(whole.total_numel()), v(whole.total_numel());
  for (size_t i = 0; i < m.size(); ++i) {
    m[i] = 0.001f * static_cast<float>(i);
    v[i] = 2.0f + 0.001f * static_cast<float>(i);
  }
  whole.adam_m_flat().copy_from(Tensor::from_vector(m, {whole.total_numel()}), Stream::cpu());
  whole.adam_v_flat().copy_from(Tensor::from_vector(v, {whole.total_numel()}), Stream::cpu());
  std::mutex mu;
  comm::run_ranks(EP * T, [&](comm::Communicator& c) {
    const int t = c.rank() % T, j = c.rank() / T;
    const ModelSpec local_spec =
        spec.with_expert_shard(EP, j).with_tensor_shard(T, t, /*sequence_parallel=*/true);
    ParamStore init(local_spec);
    init.allocate(DType::kF32, Stream::cpu());
    init.initialize(5, Stream::cpu());
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const char* layer : {"layers.0.", "layers.2."}) {
        const std::string gu = std::string(layer) + "mlp.experts.gate_up_proj.weight";
        const std::string dn = std::string(layer) + "mlp.experts.down_proj.weight";
        const std::vector<float> w_gu = values(whole, gu), w_dn = values(whole, dn);
        std::vector<float> want_gu, want_dn;
        for (int64_t e = j * El; e < (j + 1) * El; ++e) {
          for (int64_t half = 0; half < 2; ++half)  // gate rows, then up rows: this rank's F of each
            for (int64_t r = half * Fw + t * F; r < half * Fw + (t + 1) * F; ++r)
              want_gu.insert(want_gu.end(), w_gu.begin() + (e * 2 * Fw + r) * d,
                             w_gu.begin() + (e * 2 * Fw + r + 1) * d);
          for (int64_t r = 0; r < d; ++r)  // every row of down, this rank's F columns
            want_dn.insert(want_dn.end(), w_dn.begin() + (e * d + r) * Fw + t * F,
                           w_dn.begin() + (e * d + r) * Fw + (t + 1) * F);
        }
        EXPECT_EQ(values(init, gu), want_gu) << "tp " << t << " ep " << j << " " << gu;
        EXPECT_EQ(values(init, dn), want_dn) << "tp " << t << " ep " << j << " " << dn;
        EXPECT_TRUE(init.regions()[init.entry(init.find(gu)).region].experts) << gu;
      }
      // The router stays whole; the dense projections are split as under TP alone.
      EXPECT_EQ(values(init, "layers.0.mlp.router.weight"), values(whole, "layers.0.mlp.router.weight"));
      EXPECT_EQ(init.param("layers.1.mlp.down_proj.weight").size(1), spec.ffn / T);
    }
    ParamStore share(local_spec);
    share.allocate(DType::kF32, Stream::cpu());
    parallel::take_split_share(whole, share);
    for (int i = 0; i < static_cast<int>(share.entries().size()); ++i) {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(share.master(i).to_vector<float>(), init.master(i).to_vector<float>()) << share.entry(i).name;
    }
    ParamStore back(spec);
    back.allocate(DType::kF32, Stream::cpu(), DType::kF32, MasterStorage::kF32);
    parallel::gather_split_state(share, Stream::cpu(), c, Stream::cpu(), back);
    std::lock_guard<std::mutex> lock(mu);
    for (int i = 0; i < static_cast<int>(whole.entries().size()); ++i) {
      const ParamEntry& e = whole.entry(i);
      const int k = back.find(e.name);
      EXPECT_EQ(back.master(k).to_vector<float>(), whole.master(i).to_vector<float>()) << e.name;
      const ParamEntry& b = back.entry(k);
      EXPECT_EQ(back.adam_m_flat().slice(b.offset, b.offset + b.numel).to_vector<float>(),
                std::vector<float>(m.begin() + e.offset, m.begin() + e.offset + e.numel))
          << e.name;
      EXPECT_EQ(back.adam_v_flat().slice(b.offset, b.offset + b.numel).to_vector<float>(),
                std::vector<float>(v.begin() + e.offset, v.begin() + e.offset + e.numel))
          << e.name;
    }
  });
  // A group in another order than tp fastest is refused, not gathered into the wrong places.
  comm::run_ranks(EP * T, [&](comm::Communicator& c) {
    ParamStore share(spec.with_expert_shard(EP, c.rank() % EP).with_tensor_shard(T, c.rank() / EP, false));
    share.allocate(DType::kF32, Stream::cpu());
    ParamStore back(spec);
    back.allocate(DType::kF32, Stream::cpu(), DType::kF32, MasterStorage::kF32);
    const bool in_order = c.rank() % EP == c.rank() / EP;  // ranks 0 and 3 sit where tp-fastest puts them
    if (in_order) return;
    EXPECT_THROW(parallel::gather_split_state(share, Stream::cpu(), c, Stream::cpu(), back), Error);
  });
}
