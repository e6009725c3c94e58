// Adam moments in bf16 (the precision-aware optimizer; ParamStore::set_moment_dtypes): the store allocates
// them in the set dtypes in every mode, refuses them where they cannot work, and ops::copy_cast carries them
// to and from the f32 stores that stage checkpoints: widening exactly, narrowing to nearest even, so that a
// value that came from bf16 goes back bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "model/param_store.h"
#include "ops/elementwise.h"
#include "train/optimizer.h"

using namespace primus;

namespace {

// Three layers of odd widths, untied.
ModelSpec moments_spec() {
  ModelConfig m;
  m.num_layers = 3;
  m.hidden_size = 24;
  m.ffn_hidden_size = 40;
  m.num_attention_heads = 3;
  m.num_query_groups = 1;
  m.kv_channels = 8;
  m.vocab_size = m.padded_vocab_size = 37;
  m.untie_embeddings_and_output_weights = true;
  return ModelSpec::from_config(m);
}

TEST(ParamStoreMoments, AllocatesTheSetDtypesInEveryMode) {
  const ModelSpec spec = moments_spec();
  ParamStore whole(spec);
  whole.set_moment_dtypes(DType::kBF16, DType::kF32);
  whole.allocate(DType::kF32, Stream::cpu());
  EXPECT_EQ(whole.adam_m_flat().dtype(), DType::kBF16);
  EXPECT_EQ(whole.adam_v_flat().dtype(), DType::kF32);
  EXPECT_EQ(whole.adam_m_flat().numel(), whole.total_numel());
  // Masters in remainders (the GPU's layout, allowed on the CPU for tests) and ZeRO-1 / FSDP shards.
  ParamStore split(spec);
  split.set_moment_dtypes(DType::kBF16, DType::kBF16);
  split.allocate(DType::kBF16, Stream::cpu(), DType::kF32, MasterStorage::kRemainders);
  EXPECT_EQ(split.adam_v_flat().dtype(), DType::kBF16);
  for (ShardMode mode : {ShardMode::kOptimizer, ShardMode::kFull}) {
    ParamStore shard(spec, 2);
    shard.set_moment_dtypes(DType::kBF16, DType::kBF16);
    shard.allocate_sharded(DType::kF32, Stream::cpu(), mode, 2, 1);
    EXPECT_EQ(shard.adam_m_flat().dtype(), DType::kBF16);
    EXPECT_EQ(shard.adam_m_flat().numel(), shard.shard_total());
    EXPECT_EQ(shard.master_flat().dtype(), DType::kF32);
  }
  // Unset, the moments follow the master (f64 in a gradient-check store).
  ParamStore f64(spec);
  f64.allocate(DType::kF64, Stream::cpu(), DType::kF64);
  EXPECT_EQ(f64.adam_m_flat().dtype(), DType::kF64);
}

TEST(ParamStoreMoments, RefusesWhatCannotWork) {
  const ModelSpec spec = moments_spec();
  ParamStore a(spec);
  EXPECT_THROW(a.set_moment_dtypes(DType::kF16, DType::kF32), Error);
  a.set_moment_dtypes(DType::kBF16, DType::kBF16);
  EXPECT_THROW(a.allocate(DType::kF64, Stream::cpu(), DType::kF64), Error);  // bf16 beside an f64 master
  ParamStore b(spec);
  b.allocate(DType::kF32, Stream::cpu());
  EXPECT_THROW(b.set_moment_dtypes(DType::kBF16, DType::kBF16), Error);  // already allocated
}

// The optimizer over a store with bf16 moments is the op over its flat buffers (the spans carry the dtype).
TEST(ParamStoreMoments, AdamWUpdatesTheBf16Moments) {
  ParamStore p(moments_spec());
  p.set_moment_dtypes(DType::kBF16, DType::kBF16);
  p.allocate(DType::kF32, Stream::cpu());
  p.initialize(7, Stream::cpu());
  ops::fill_(p.grad_flat(), 0.25f, Stream::cpu());
  OptimConfig oc;
  oc.weight_decay = 0.0;
  AdamW opt(oc, p);
  opt.step(1e-3, 1.0f, Stream::cpu());
  // m = (1 - 0.9) * 0.25 and v = (1 - 0.999) * 0.0625, rounded to bf16, in every parameter's slot.
  const std::vector<float> m = p.adam_m_flat().to_vector<float>(), v = p.adam_v_flat().to_vector<float>();
  const float m_want = bf16_to_float(float_to_bf16(static_cast<float>(0.1 * 0.25)));
  const float v_want = bf16_to_float(float_to_bf16(static_cast<float>((1 - 0.999) * 0.0625)));
  for (const ParamEntry& e : p.entries()) {
    EXPECT_EQ(m[static_cast<size_t>(e.offset)], m_want) << e.name;
    EXPECT_EQ(v[static_cast<size_t>(e.offset + e.numel - 1)], v_want) << e.name;
  }
}

TEST(CopyCast, WidensExactlyAndNarrowsToNearestEven) {
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (even: 1); 1 + 3 * 2^-8 rounds up to 1 + 2^-6 (even).
  Tensor f = Tensor::from_vector<float>({1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f}, {4});
  Tensor b = Tensor::empty({4}, DType::kBF16);
  ops::copy_cast(f, b, Stream::cpu());
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1.0f, 1.0f, 1.0f + 0x1p-6f, -2.5f}));
  Tensor back = Tensor::empty({2, 2}, DType::kF32);  // another shape, the same elements
  ops::copy_cast(b, back, Stream::cpu());
  EXPECT_EQ(back.to_vector<float>(), b.to_vector<float>());
  Tensor again = Tensor::empty({4}, DType::kBF16);
  ops::copy_cast(back, again, Stream::cpu());
  EXPECT_EQ(std::memcmp(again.data_ptr(), b.data_ptr(), b.nbytes()), 0);
  Tensor same = Tensor::empty({4}, DType::kF32);  // equal dtypes: a plain copy
  ops::copy_cast(f, same, Stream::cpu());
  EXPECT_EQ(same.to_vector<float>(), f.to_vector<float>());
  Tensor wrong = Tensor::empty({3}, DType::kBF16);
  EXPECT_THROW(ops::copy_cast(f, wrong, Stream::cpu()), Error);
}

}  // namespace
