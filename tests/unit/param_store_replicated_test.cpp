// Replicated entries of a ParamStore (ParamEntry::replicated: the MoE expert bias) under sharded optimizer
// state (ZeRO-1, FSDP): every rank keeps the entry's whole f32 value beside its master chunks, from
// initialisation on; set_master writes that copy, the entry's part of this rank's master chunk (the chunks of
// all ranks put together are the value, as a checkpoint gathers them: also when a chunk boundary falls inside
// the entry) and ZeRO-1's whole compute copy. Every other entry of a sharded store still refuses both.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "model/param_store.h"
#include "unit/model_grad_util.h"

using namespace primus;

namespace {

// A dense layer, then an MoE layer of `experts` one-column experts with the expert bias: a small region, so
// that many ranks cut it finely enough for a chunk boundary to fall inside the bias.
ModelSpec moe_spec(int64_t experts) {
  ModelConfig m = grad_test::tiny_model(/*qk_norm=*/false, /*qkv_bias=*/false, /*tied=*/false);
  m.moe.num_experts = experts;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 1;
  m.moe.layer_is_moe = {0, 1};
  m.moe.expert_bias = true;
  return ModelSpec::from_config(m);
}

constexpr const char* kBias = "layers.1.mlp.router.expert_bias";

}  // namespace

TEST(ParamStoreReplicated, OnlyTheExpertBiasIsReplicated) {
  ParamStore p(moe_spec(8));
  int replicated = 0;
  for (const ParamEntry& e : p.entries()) {
    EXPECT_EQ(e.replicated, e.name == kBias) << e.name;
    replicated += e.replicated ? 1 : 0;
  }
  EXPECT_EQ(replicated, 1);
}

TEST(ParamStoreReplicated, ShardedStoresHoldTheWholeValueAndTheirChunksOfIt) {
  const int64_t E = 128;
  const ModelSpec spec = moe_spec(E);
  std::vector<float> value(E);
  for (int64_t e = 0; e < E; ++e) value[e] = 1e-3f * static_cast<float>(e % 7) - 2.5e-3f;
  const Tensor v = Tensor::from_vector(value, {E});
  // Some rank held part of the bias, not all or nothing: at 48 ranks a chunk is 192 elements and a boundary
  // falls in the middle of the 128 (real models: DeepSeek-V3's 256 experts under many ranks).
  bool split_inside = false;
  struct Case {
    ShardMode mode;
    DType compute;
  };
  for (int n : {2, 4, 48})
    for (const Case c : {Case{ShardMode::kOptimizer, DType::kF32}, Case{ShardMode::kOptimizer, DType::kBF16},
                         Case{ShardMode::kFull, DType::kF32}}) {
      SCOPED_TRACE(::testing::Message() << n << " ranks, mode " << static_cast<int>(c.mode) << ", compute "
                                        << dtype_name(c.compute));
      ParamStore layout(spec, n);
      const int b = layout.find(kBias);
      ASSERT_GE(b, 0);
      const ParamEntry& be = layout.entry(b);
      std::vector<float> gathered(static_cast<size_t>(layout.total_numel()), -1.0f);
      for (int rank = 0; rank < n; ++rank) {
        ParamStore ps(spec, n);
        ps.allocate_sharded(c.compute, Stream::cpu(), c.mode, n, rank);
        ps.initialize(5, Stream::cpu());
        EXPECT_EQ(ps.master_f32(b, Stream::cpu()).to_vector<float>(), std::vector<float>(E, 0.0f));
        ps.set_master(b, v, Stream::cpu());
        EXPECT_EQ(ps.master_f32(b, Stream::cpu()).to_vector<float>(), value);
        // This rank's chunk of the bias's region, put where it lies in the whole layout.
        const int r = be.region;
        const std::vector<float> chunk = ps.master_flat()
                                             .slice(ps.shard_offset(r), ps.shard_offset(r) + ps.chunk_len(r))
                                             .to_vector<float>();
        std::copy(chunk.begin(), chunk.end(), gathered.begin() + ps.chunk_begin(r));
        const int64_t held = std::min(ps.chunk_begin(r) + ps.chunk_len(r), be.offset + E) -
                             std::max(ps.chunk_begin(r), be.offset);
        if (held > 0 && held < E) split_inside = true;
        if (c.mode == ShardMode::kOptimizer) {  // the whole compute copy: the value's compute bits
          Tensor want = Tensor::empty({E}, c.compute);
          ParamStore::compute_from_master(v, want, Stream::cpu());
          EXPECT_EQ(ps.param(b).to_vector<float>(), want.to_vector<float>());
        }
        // Every other entry stays sharded.
        const int router = ps.find("layers.1.mlp.router.weight");
        EXPECT_THROW(ps.master_f32(router, Stream::cpu()), Error);
        EXPECT_THROW(ps.set_master(router, Tensor::zeros(ps.entry(router).shape, DType::kF32), Stream::cpu()),
                     Error);
      }
      const std::vector<float> bias(gathered.begin() + be.offset, gathered.begin() + be.offset + E);
      EXPECT_EQ(bias, value);
    }
  EXPECT_TRUE(split_inside) << "no layout put a chunk boundary inside the bias: the split write is untested";
}
