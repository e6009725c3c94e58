// Whole-model gradient check: the explicit backward of the decoder (every layer, the chunked head, the
// embedding) against central finite differences of the loss, all in f64 on the CPU reference ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "model/llama_model.h"
#include "ops/elementwise.h"
#include "unit/model_grad_util.h"

using namespace primus;

using namespace primus::grad_test;

TEST(ModelGradient, LlamaMatchesFiniteDifferences) {
  check_gradients(tiny_model(false, false, false), {});
}

TEST(ModelGradient, Qwen3StyleQkNormAndBiasMatchFiniteDifferences) {
  check_gradients(tiny_model(true, true, false), {});
}

TEST(ModelGradient, TiedEmbeddingsMatchFiniteDifferences) {
  check_gradients(tiny_model(false, false, true), {});
}

// Partial rotary (rotary_percent): RoPE on the first 4 of each head's 6 elements, the last 2 position-free.
TEST(ModelGradient, PartialRotaryMatchesFiniteDifferences) {
  ModelConfig c = tiny_model(true, false, false);
  c.kv_channels = 6;
  c.rotary_percent = 0.7;  // int(6 x 0.7) = 4
  ASSERT_EQ(ModelSpec::from_config(c).rope_dim(), 4);
  check_gradients(c, {});
}

TEST(ModelGradient, RecomputeModesGiveBitwiseIdenticalGradients) {
  ModelConfig c = tiny_model(true, true, false);
  auto grads = [&](const std::string& gran, const std::string& method, std::vector<int64_t> ids = {}) {
    RecomputeConfig rc;
    rc.granularity = gran;
    rc.method = method;
    rc.num_layers = 1;
    rc.layer_ids = std::move(ids);
    Fixture f(c, rc, 9);
    f.params.grad_flat().zero_(Stream::cpu());
    f.model.forward_backward(f.tokens, f.targets, 0.5f);
    return f.params.grad_flat().to_vector<double>();
  };
  const auto base = grads("", "");
  EXPECT_EQ(base, grads("full", "uniform"));
  EXPECT_EQ(base, grads("full", "block"));
  EXPECT_EQ(base, grads("selective", ""));
  EXPECT_EQ(base, grads("full", "", {1}));  // Primus's recompute_layer_ids: the second layer only
}

TEST(ModelGradient, RecomputePlanFollowsMegatronKeys) {
  RecomputeConfig rc;
  EXPECT_EQ(recompute_plan(rc, 3), std::vector<RecomputeMode>(3, RecomputeMode::kNone));
  rc.granularity = "full";
  rc.method = "block";
  rc.num_layers = 2;
  EXPECT_EQ(recompute_plan(rc, 4), (std::vector<RecomputeMode>{RecomputeMode::kFull, RecomputeMode::kFull,
                                                               RecomputeMode::kNone, RecomputeMode::kNone}));
  // ... of the pipeline stage: a stage holding layers 2 and 3 recomputes those, not layers 0 and 1 it lacks.
  EXPECT_EQ(recompute_plan(rc, 4, {0, 0, 1, 1}),
            (std::vector<RecomputeMode>{RecomputeMode::kNone, RecomputeMode::kNone, RecomputeMode::kFull,
                                        RecomputeMode::kFull}));
  rc.num_layers = 1;
  EXPECT_EQ(recompute_plan(rc, 5, {0, 1, 0, 1}),  // layers 1 and 3 here, then an MTP depth
            (std::vector<RecomputeMode>{RecomputeMode::kNone, RecomputeMode::kFull, RecomputeMode::kNone,
                                        RecomputeMode::kNone, RecomputeMode::kNone}));
  rc.method = "uniform";
  EXPECT_EQ(recompute_plan(rc, 2), std::vector<RecomputeMode>(2, RecomputeMode::kFull));
  // Primus's recompute_layer_ids: exactly the listed layers (the plan's last entries are the MTP depths).
  rc.method = "";
  rc.layer_ids = {0, 3, 4};
  EXPECT_EQ(recompute_plan(rc, 5),
            (std::vector<RecomputeMode>{RecomputeMode::kFull, RecomputeMode::kNone, RecomputeMode::kNone,
                                        RecomputeMode::kFull, RecomputeMode::kFull}));
  rc.layer_ids.clear();
  rc.granularity = "selective";
  EXPECT_EQ(recompute_plan(rc, 2), std::vector<RecomputeMode>(2, RecomputeMode::kSelective));
  rc.granularity = "sometimes";
  EXPECT_THROW(recompute_plan(rc, 2), Error);
}

// ParamStore::set_overwritten_grads: the projections' first weight-gradient GEMM of a step overwrites
// (beta = 0) instead of adding into a zeroed buffer. Whatever the buffer held before the step (here NaN
// everywhere), two micro-batches must give bitwise the gradients of zero-then-accumulate.
TEST(ModelGradient, OverwrittenFirstGradientWriteEqualsZeroThenAccumulate) {
  for (const bool tied : {false, true}) {
    ModelConfig c = tiny_model(true, true, tied);  // qk-norm and qkv bias: every kind of entry
    auto grads = [&](bool overwrite) {
      Fixture f(c, {}, 11);
      if (overwrite) {
        f.params.set_overwritten_grads(f.model.gemm_written_grad_entries());
        ops::fill_(f.params.grad_flat(), std::numeric_limits<float>::quiet_NaN(), Stream::cpu());
      }
      f.params.begin_grad_step(Stream::cpu());
      f.model.forward_backward(f.tokens, f.targets, 0.5f);
      f.model.forward_backward(f.tokens, f.targets, 0.25f);
      f.params.end_grad_step(Stream::cpu());
      return f.params.grad_flat().to_vector<double>();
    };
    const std::vector<double> base = grads(false), over = grads(true);
    ASSERT_EQ(base.size(), over.size());
    int64_t differ = 0;
    for (size_t i = 0; i < base.size(); ++i) differ += std::memcmp(&base[i], &over[i], sizeof(double)) != 0;
    EXPECT_EQ(differ, 0) << (tied ? "tied" : "untied") << " embeddings";
  }
}

// A listed entry that no GEMM wrote in the step (its layer skipped) is zeroed by end_grad_step, not left
// stale.
TEST(ModelGradient, EndGradStepZeroesListedEntriesNotWritten) {
  Fixture f(tiny_model(false, false, false), {}, 12);
  const std::vector<int> listed = f.model.gemm_written_grad_entries();
  f.params.set_overwritten_grads(listed);
  ops::fill_(f.params.grad_flat(), 7.0f, Stream::cpu());
  f.params.begin_grad_step(Stream::cpu());
  EXPECT_FALSE(f.params.grad_accumulate(listed[0]));  // the first write of the step overwrites ...
  EXPECT_TRUE(f.params.grad_accumulate(listed[0]));   // ... later ones add
  f.params.end_grad_step(Stream::cpu());
  for (size_t k = 1; k < listed.size(); ++k)
    for (double v : f.params.grad(listed[k]).to_vector<double>()) ASSERT_EQ(v, 0.0) << k;
  // entry listed[0] was "written" (by nobody here): it keeps its value
  EXPECT_EQ(f.params.grad(listed[0]).to_vector<double>()[0], 7.0);
  // and everything not listed was zeroed at the start of the step
  for (const auto& e : f.params.entries()) {
    const int i = f.params.find(e.name);
    if (std::find(listed.begin(), listed.end(), i) != listed.end()) continue;
    for (double v : f.params.grad(i).to_vector<double>()) ASSERT_EQ(v, 0.0) << e.name;
  }
}

// FSDP's per-region buffers: begin_region_grads zeroes exactly the parts of region r that no GEMM overwrites
// (norms, biases, an untied embedding, padding) and leaves the GEMM-written entries alone.
TEST(ModelGradient, RegionGradBuffersZeroOnlyWhatNoGemmOverwrites) {
  Fixture f(tiny_model(true, true, false), {}, 13);
  const std::vector<int> listed = f.model.gemm_written_grad_entries();
  f.params.set_overwritten_grads(listed);
  for (size_t r = 0; r < f.params.regions().size(); ++r) {
    const ParamRegion& reg = f.params.regions()[r];
    Tensor buf = Tensor::empty({reg.end - reg.begin}, DType::kF64);
    ops::fill_(buf, std::numeric_limits<float>::quiet_NaN(), Stream::cpu());
    f.params.begin_region_grads(static_cast<int>(r), buf, Stream::cpu());
    const std::vector<double> v = buf.to_vector<double>();
    std::vector<char> gemm(v.size(), 0);
    for (int i : listed) {
      const ParamEntry& e = f.params.entry(i);
      if (e.region != static_cast<int>(r)) continue;
      for (int64_t j = 0; j < e.numel; ++j) gemm[e.offset - reg.begin + j] = 1;
    }
    for (size_t j = 0; j < v.size(); ++j) {
      if (gemm[j])
        ASSERT_TRUE(std::isnan(v[j]))
            << "region " << r << " element " << j << " (a GEMM writes it: untouched)";
      else
        ASSERT_EQ(v[j], 0.0) << "region " << r << " element " << j;
    }
  }
}
