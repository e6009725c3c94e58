// Whole-model gradient checks of MoE decoders (model/moe_mlp.h) in f64 on the CPU reference ops: the explicit
// backward through router, permutation, grouped expert GEMMs, unpermutation, shared expert and the
// balancing losses against central finite differences of (token losses + aux / z losses), for the routing
// variants of Mixtral, Qwen2/3-MoE (with Qwen2-MoE's gated shared expert), DeepSeek and Grok-2 (soft-capped
// router and output logits), dropless and with
// capacity dropping; recompute modes give bitwise the same gradients; the expert bias moves selection only
// and follows the balancing rule.
#include <gtest/gtest.h>

#include "unit/model_grad_util.h"

using namespace primus;
using namespace primus::grad_test;

namespace {

ModelConfig tiny_moe(int64_t experts, int64_t topk, std::vector<char> layers) {
  ModelConfig m = tiny_model(/*qk_norm=*/false, /*qkv_bias=*/false, /*tied=*/false);
  m.num_layers = static_cast<int64_t>(layers.size());
  m.moe.num_experts = experts;
  m.moe.topk = topk;
  m.moe.ffn_hidden_size = 8;
  m.moe.layer_is_moe = std::move(layers);
  m.moe.aux_loss_coeff = 0.3;  // large, so the balancing gradient is not lost under the token losses'
  m.moe.z_loss_coeff = 0.05;
  return m;
}

}  // namespace

TEST(ModelMoeGradient, MixtralStyleTopkThenSoftmaxWithAuxAndZLoss) {
  check_gradients(tiny_moe(4, 2, {1, 1}), {});
}

// Grok-2: the router's logits and the output logits soft-capped (c tanh(z / c)); caps small enough that the
// tiny model's logits reach tanh's curved part, so a missing cap derivative would show.
TEST(ModelMoeGradient, Grok2StyleSoftcappedRouterAndOutputLogits) {
  ModelConfig m = tiny_moe(4, 2, {1, 1});
  m.moe.router_softcap = 0.3;
  m.final_logit_softcap = 0.5;
  check_gradients(m, {});
}

TEST(ModelMoeGradient, QwenStylePreSoftmaxSharedExpertAndADenseLayer) {
  ModelConfig m = tiny_moe(6, 3, {0, 1});
  m.qk_layernorm = true;
  m.moe.pre_softmax = true;
  m.moe.shared_ffn_hidden_size = 12;
  m.moe.load_balancing = "seq_aux_loss";
  check_gradients(m, {});
}

// Qwen2-MoE: softmax over all experts, not renormalised, q/k/v biases, and the shared expert scaled by
// sigmoid(h . w_gate) (its backward: d shared = g dy, d logit = g (1 - g) sum(dy * shared), then the gate's
// GEMMs), with a dense layer between MoE layers.
TEST(ModelMoeGradient, Qwen2MoeGatedSharedExpert) {
  ModelConfig m = tiny_moe(6, 2, {1, 0, 1});
  m.add_qkv_bias = true;
  m.moe.pre_softmax = true;
  m.moe.shared_ffn_hidden_size = 12;
  m.moe.shared_expert_gate = true;
  ParamStore layout(ModelSpec::from_config(m));
  ASSERT_GE(layout.find("layers.0.mlp.shared_expert_gate.weight"), 0);
  EXPECT_EQ(layout.entry(layout.find("layers.2.mlp.shared_expert_gate.weight")).shape, (Shape{1, 16}));
  EXPECT_LT(layout.find("layers.1.mlp.shared_expert_gate.weight"), 0);  // the dense layer
  check_gradients(m, {});
}

TEST(ModelMoeGradient, DeepSeekStyleSigmoidGroupsBiasAndScaling) {
  ModelConfig m = tiny_moe(8, 2, {1, 1});
  m.moe.score_function = "sigmoid";
  m.moe.normalize_topk = true;
  m.moe.num_groups = 4;
  m.moe.group_topk = 2;
  m.moe.topk_scaling_factor = 2.5;
  m.moe.expert_bias = true;  // perturbed by the fixture like every non-decay entry: selection changes
  m.moe.shared_ffn_hidden_size = 8;
  m.moe.load_balancing = "seq_aux_loss";
  check_gradients(m, {});
}

TEST(ModelMoeGradient, CapacityDroppingWithAndWithoutPadding) {
  for (const bool pad : {false, true}) {
    for (const char* policy : {"probs", "position"}) {
      SCOPED_TRACE(std::string(pad ? "padded " : "") + policy);
      ModelConfig m = tiny_moe(4, 2, {1, 1});
      m.moe.capacity_factor = 0.6;  // 14 tokens x 2 / 4 x 0.6 -> capacity 5 of ~7 per expert: drops
      m.moe.pad_to_capacity = pad;
      m.moe.drop_policy = policy;
      check_gradients(m, {});
    }
  }
}

TEST(ModelMoeGradient, RecomputeModesGiveBitwiseIdenticalGradients) {
  ModelConfig c = tiny_moe(6, 2, {1, 0, 1});
  c.moe.shared_ffn_hidden_size = 8;
  c.moe.shared_expert_gate = true;  // the gate's saved output and logits under every mode
  auto grads = [&](const std::string& gran, const std::string& method) {
    RecomputeConfig rc;
    rc.granularity = gran;
    rc.method = method;
    rc.num_layers = 2;
    Fixture f(c, rc, 5);
    f.params.grad_flat().zero_(Stream::cpu());
    f.model.forward_backward(f.tokens, f.targets, 0.5f, 0.25f);
    return f.params.grad_flat().to_vector<double>();
  };
  const auto base = grads("", "");
  EXPECT_EQ(base, grads("full", "uniform"));
  EXPECT_EQ(base, grads("full", "block"));
  EXPECT_EQ(base, grads("selective", ""));
}

// The expert bias (f32, as in training) moves by rate x sign(mean load - load) after a step and never gets a
// gradient; AdamW then leaves it bitwise as it is (zero gradient, no decay), which the e2e resume test
// covers.
TEST(ModelMoeGradient, ExpertBiasFollowsTheBalancingRule) {
  ModelConfig c = tiny_moe(4, 1, {1});
  c.moe.expert_bias = true;
  c.moe.bias_update_rate = 0.125;
  ParamStore params(ModelSpec::from_config(c));
  params.allocate(DType::kF32, Stream::cpu());
  params.initialize(3, Stream::cpu());
  LlamaModel model(c, {}, params, Stream::cpu(), 8);
  std::vector<int32_t> t(16), y(16);
  for (int i = 0; i < 16; ++i) t[i] = y[i] = (i * 7) % 23;
  Tensor tokens = Tensor::from_vector(t, {2, 8}), targets = Tensor::from_vector(y, {2, 8});
  params.grad_flat().zero_(Stream::cpu());
  model.forward_backward(tokens, targets, 1.0f, 1.0f);
  const int bias = params.find("layers.0.mlp.router.expert_bias");
  ASSERT_GE(bias, 0);
  for (float g : params.grad(bias).to_vector<float>()) EXPECT_EQ(g, 0.0f);
  std::vector<MoeLayerStats> stats = model.take_moe_stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].routed, 16);
  EXPECT_EQ(stats[0].dropped, 0);
  EXPECT_DOUBLE_EQ(stats[0].mean_load, 4.0);
  EXPECT_GE(stats[0].max_load, 4);
  EXPECT_GT(stats[0].aux_loss, 0.0);
  model.end_step();
  // 16 tokens over 4 experts: mean 4. An expert above it moves down by the rate, one below moves up.
  const std::vector<float> b = params.master(bias).to_vector<float>();
  int moved = 0;
  for (float v : b) {
    EXPECT_TRUE(v == 0.0f || v == 0.125f || v == -0.125f) << v;
    moved += v != 0.0f;
  }
  if (stats[0].max_load > 4) EXPECT_GT(moved, 0);
  // The statistics were taken: a new take starts from zero.
  EXPECT_EQ(model.take_moe_stats()[0].forwards, 0);
}
