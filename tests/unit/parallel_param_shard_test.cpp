// ParamStore sharding for data parallelism: padded regions split into aligned chunks, every rank's chunks of
// an initialised store are exactly its slice of the whole store, and whole-region views resolve only while a
// region is attached (FSDP).
#include <gtest/gtest.h>

#include "model/param_store.h"

using namespace primus;

namespace {
ModelSpec small_spec() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.ffn_hidden_size = 48;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;
  m.kv_channels = 8;
  m.vocab_size = m.padded_vocab_size = 40;
  return ModelSpec::from_config(m);
}
}  // namespace

TEST(ParallelParamShard, RegionsPadToTheShardCount) {
  ParamStore whole(small_spec());
  for (int n : {2, 3, 4}) {
    ParamStore ps(small_spec(), n);
    ASSERT_EQ(ps.regions().size(), whole.regions().size());
    for (size_t r = 0; r < ps.regions().size(); ++r) {
      const int64_t len = ps.regions()[r].end - ps.regions()[r].begin;
      EXPECT_EQ(len % (64 * n), 0) << "region " << r << " n " << n;
      EXPECT_GE(len, whole.regions()[r].end - whole.regions()[r].begin);
    }
    EXPECT_EQ(ps.parameter_count(), whole.parameter_count());
  }
}

TEST(ParallelParamShard, ChunksAreSlicesOfTheWholeInitialisation) {
  const int n = 4;
  ParamStore full(small_spec(), n);
  full.allocate(DType::kF32, Stream::cpu());
  full.initialize(7, Stream::cpu());
  const std::vector<float> w = full.master_flat().to_vector<float>();
  for (ShardMode mode : {ShardMode::kOptimizer, ShardMode::kFull}) {
    for (int rank = 0; rank < n; ++rank) {
      ParamStore ps(small_spec(), n);
      ps.allocate_sharded(DType::kF32, Stream::cpu(), mode, n, rank);
      ps.initialize(7, Stream::cpu());
      EXPECT_EQ(ps.shard_total() * n, ps.total_numel());
      const std::vector<float> mine = ps.master_flat().to_vector<float>();
      ASSERT_EQ(static_cast<int64_t>(mine.size()), ps.shard_total());
      for (size_t r = 0; r < ps.regions().size(); ++r) {
        const int ri = static_cast<int>(r);
        for (int64_t j = 0; j < ps.chunk_len(ri); ++j)
          ASSERT_EQ(mine[ps.shard_offset(ri) + j], w[ps.chunk_begin(ri) + j]) << "region " << r;
      }
      if (mode == ShardMode::kOptimizer) {
        // ZeRO-1: the compute copy is whole (and separate from the sharded master).
        EXPECT_FALSE(ps.compute_aliases_master());
        EXPECT_EQ(ps.compute_flat().to_vector<float>(), w);
      }
    }
  }
}

TEST(ParallelParamShard, FsdpViewsNeedAnAttachedRegion) {
  ParamStore ps(small_spec(), 2);
  ps.allocate_sharded(DType::kF32, Stream::cpu(), ShardMode::kFull, 2, 1);
  const int i = ps.find("layers.1.mlp.down_proj.weight");
  ASSERT_GE(i, 0);
  EXPECT_THROW(ps.param(i), Error);
  EXPECT_THROW(ps.master(i), Error);
  const int r = ps.region_of_entry(i);
  Tensor whole = Tensor::zeros({ps.region_len(r)}, DType::kF32);
  Tensor grad = Tensor::zeros({ps.region_len(r)}, DType::kF32);
  ps.attach_region(r, whole, grad);
  Tensor p = ps.param(i);
  EXPECT_EQ(p.shape(), ps.entry(i).shape);
  EXPECT_EQ(p.data_ptr(),
            static_cast<void*>(whole.data<float>() + (ps.entry(i).offset - ps.regions()[r].begin)));
  ps.detach_region(r);
  EXPECT_THROW(ps.grad(i), Error);
}
