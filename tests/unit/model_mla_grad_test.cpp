// Whole-model gradient checks of multi-latent attention (model/mla_attention.h), YaRN and multi-token
// prediction (model/mtp.h) in f64 on the CPU reference ops: the explicit backward against central finite
// differences of the step's loss (token losses + MTP losses at their scales + MoE balancing losses), with and
// without the low-rank query, tied and untied, dense and DeepSeek-style MoE; recompute modes give bitwise the
// same gradients; the parameter layout has HF DeepSeek's names and shapes.
#include <gtest/gtest.h>

#include "config/torchtitan_flavors.h"
#include "model/mtp.h"
#include "ops/rope.h"
#include "unit/model_grad_util.h"

using namespace primus;
using namespace primus::grad_test;

namespace {

ModelConfig with_deepseek_moe(ModelConfig m) {
  m.num_layers = 2;
  m.moe.num_experts = 8;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 6;
  m.moe.shared_ffn_hidden_size = 6;
  m.moe.layer_is_moe = {0, 1};  // a dense first layer
  m.moe.score_function = "sigmoid";
  m.moe.normalize_topk = true;
  m.moe.num_groups = 4;
  m.moe.group_topk = 2;
  m.moe.topk_scaling_factor = 2.5;
  m.moe.expert_bias = true;
  m.moe.load_balancing = "seq_aux_loss";
  m.moe.aux_loss_coeff = 0.3;
  return m;
}

// The loss forward_backward(grad_scale = 1, aux_grad_scale = 1) differentiates: the main token losses, each
// MTP depth's token losses times (lambda / D) * counted / counted_k, and the MoE balancing losses.
double full_loss(Fixture& f) {
  Tensor l = f.model.forward_loss(f.tokens, f.targets, /*with_mtp=*/true);
  double s = 0;
  for (double v : l.to_vector<double>()) s += v;
  const int64_t D = f.cfg.mtp_num_layers;
  if (D > 0) {
    int64_t counted = 0;
    for (int32_t t : f.targets.to_vector<int32_t>()) counted += t >= 0;
    const std::vector<int64_t> ck = mtp_batch(f.tokens, f.targets, D).counts;
    for (int64_t k = 0; k < D; ++k) {
      double sk = 0;
      for (double v : f.model.mtp_losses()[k].to_vector<double>()) sk += v;
      s += f.cfg.mtp_loss_scaling_factor / static_cast<double>(D) * static_cast<double>(counted) /
           static_cast<double>(ck[k]) * sk;
    }
  }
  return s + f.model.moe_losses_of_last_forward();
}

void check_full_gradients(const ModelConfig& c, const RecomputeConfig& rc = {}) {
  Fixture f(c, rc, 42);
  f.params.grad_flat().zero_(Stream::cpu());
  Tensor losses = f.model.forward_backward(f.tokens, f.targets, 1.0f, /*aux_grad_scale=*/1.0f);
  const double at_forward = full_loss(f);  // same weights: the forward-only path agrees on the loss
  double main = 0;
  for (double v : losses.to_vector<double>()) main += v;
  Tensor again = f.model.forward_loss(f.tokens, f.targets);
  double main2 = 0;
  for (double v : again.to_vector<double>()) main2 += v;
  EXPECT_NEAR(main, main2, 1e-12 * std::abs(main));
  if (c.mtp_num_layers > 0 || c.moe.enabled())
    EXPECT_GT(at_forward, main);  // MTP and balancing losses add to it
  else
    EXPECT_EQ(at_forward, main);

  // (the expert bias steers selection only: no gradient)
  const int checked = grad_test::check_store_gradients(
      f.params, [&] { return full_loss(f); }, 10, 7,
      [](const std::string& name) { return name.find("expert_bias") != std::string::npos; });
  EXPECT_GT(checked, 100);
}

std::vector<double> grads_with(const ModelConfig& c, const std::string& gran, const std::string& method) {
  RecomputeConfig rc;
  rc.granularity = gran;
  rc.method = method;
  rc.num_layers = 1;
  Fixture f(c, rc, 5);
  f.params.grad_flat().zero_(Stream::cpu());
  f.model.forward_backward(f.tokens, f.targets, 0.5f, 0.25f);
  return f.params.grad_flat().to_vector<double>();
}

}  // namespace

TEST(ModelMlaGradient, LowRankQueryUntied) {
  check_full_gradients(tiny_mla(/*q_lora=*/6, /*tied=*/false));
}

TEST(ModelMlaGradient, DirectQueryTiedPlainRope) {
  ModelConfig m = tiny_mla(/*q_lora=*/0, /*tied=*/true);
  m.mla.yarn = false;
  check_full_gradients(m);
}

TEST(ModelMlaGradient, DeepSeekV3StyleMoeAndTwoMtpDepths) {
  ModelConfig m = with_deepseek_moe(tiny_mla(6, false));
  m.mtp_num_layers = 2;
  m.mtp_loss_scaling_factor = 0.7;  // large, so the MTP gradient is not lost under the main loss
  check_full_gradients(m);
}

TEST(ModelMlaGradient, MtpOnAStandardAttentionModelTied) {
  ModelConfig m = tiny_model(/*qk_norm=*/true, /*qkv_bias=*/true, /*tied=*/true);
  m.mtp_num_layers = 1;
  m.mtp_loss_scaling_factor = 0.5;
  check_full_gradients(m);
}

TEST(ModelMlaGradient, RecomputeModesGiveBitwiseIdenticalGradients) {
  for (const int64_t q_lora : {0, 6}) {
    SCOPED_TRACE(q_lora);
    ModelConfig c = with_deepseek_moe(tiny_mla(q_lora, false));
    c.num_layers = 3;
    c.moe.layer_is_moe = {0, 1, 1};
    c.mtp_num_layers = 1;
    const auto base = grads_with(c, "", "");
    EXPECT_EQ(base, grads_with(c, "full", "uniform"));
    EXPECT_EQ(base, grads_with(c, "full", "block"));  // block 1: layer 0 recomputes, the rest keep
    EXPECT_EQ(base, grads_with(c, "selective", ""));
  }
}

TEST(ModelMla, ParameterLayoutFollowsHfDeepSeek) {
  ModelConfig m = with_deepseek_moe(tiny_mla(6, false));
  m.mtp_num_layers = 1;
  const ModelSpec spec = ModelSpec::from_config(m);
  ParamStore p(spec);
  const int64_t d = 16, H = 4;
  auto shape = [&](const std::string& n) {
    const int i = p.find(n);
    EXPECT_GE(i, 0) << n;
    return i >= 0 ? p.entry(i).shape : Shape{};
  };
  EXPECT_EQ(shape("layers.0.self_attn.q_a_proj.weight"), (Shape{6, d}));
  EXPECT_EQ(shape("layers.0.self_attn.q_a_layernorm.weight"), (Shape{6}));
  EXPECT_EQ(shape("layers.0.self_attn.q_b_proj.weight"), (Shape{H * 7, 6}));
  EXPECT_EQ(shape("layers.0.self_attn.kv_a_proj_with_mqa.weight"), (Shape{5 + 4, d}));
  EXPECT_EQ(shape("layers.0.self_attn.kv_a_layernorm.weight"), (Shape{5}));
  EXPECT_EQ(shape("layers.0.self_attn.kv_b_proj.weight"), (Shape{H * (3 + 3), 5}));
  EXPECT_EQ(shape("layers.1.self_attn.o_proj.weight"), (Shape{d, H * 3}));
  EXPECT_EQ(p.find("layers.0.self_attn.qkv_proj.weight"), -1);
  EXPECT_EQ(p.find("layers.0.self_attn.q_proj.weight"), -1);
  EXPECT_EQ(shape("mtp.0.eh_proj.weight"), (Shape{d, 2 * d}));
  EXPECT_EQ(shape("mtp.0.enorm.weight"), (Shape{d}));
  EXPECT_EQ(shape("mtp.0.hnorm.weight"), (Shape{d}));
  EXPECT_EQ(shape("mtp.0.final_layernorm.weight"), (Shape{d}));
  EXPECT_EQ(shape("mtp.0.layer.self_attn.kv_b_proj.weight"), (Shape{H * (3 + 3), 5}));
  EXPECT_EQ(shape("mtp.0.layer.mlp.router.weight"), (Shape{8, d}));  // the last layer's kind: MoE
  // MTP lives in the head region, behind the final norm's decay split.
  const int head = static_cast<int>(spec.layers) + 1;
  EXPECT_EQ(p.entry(p.find("mtp.0.eh_proj.weight")).region, head);
  EXPECT_TRUE(p.entry(p.find("mtp.0.eh_proj.weight")).decay);
  EXPECT_FALSE(p.entry(p.find("mtp.0.enorm.weight")).decay);
  ModelConfig direct = tiny_mla(0, false);
  ParamStore q(ModelSpec::from_config(direct));
  EXPECT_GE(q.find("layers.1.self_attn.q_proj.weight"), 0);
  EXPECT_EQ(q.entry(q.find("layers.1.self_attn.q_proj.weight")).shape, (Shape{H * 7, d}));
  EXPECT_EQ(q.find("layers.1.self_attn.q_a_layernorm.weight"), -1);
}

TEST(ModelMla, SoftmaxScaleCarriesYarnTemperature) {
  ModelConfig m = tiny_mla(6, false);
  m.mla.rotary_scaling_factor = 40.0;
  m.mla.mscale_all_dim = 0.707;
  const double mm = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_NEAR(ModelSpec::from_config(m).attn_scale, mm * mm / std::sqrt(7.0), 1e-7);
  m.mla.rotary_scaling_factor = 1.0;  // no scaling: plain 1/sqrt(dn + dr)
  EXPECT_NEAR(ModelSpec::from_config(m).attn_scale, 1.0 / std::sqrt(7.0), 1e-7);
}

// Depth k reads the tokens rolled left by k within each sequence and predicts the targets shifted left by k
// (-1 past the end); a target masked in the main loss stays masked at its shifted place, and the counts skip
// the shifted tail.
TEST(ModelMtp, ShiftedIdsAndTargetsOfWholeSequences) {
  Tensor x = Tensor::from_vector(std::vector<int32_t>{10, 11, 12, 13, 20, 21, 22, 23}, {2, 4});
  Tensor y = Tensor::from_vector(std::vector<int32_t>{5, 6, -1, 7, 1, -1, 2, 3}, {2, 4});
  const MtpBatch m = mtp_batch(x, y, 3);
  EXPECT_EQ(m.counted, 6);
  EXPECT_EQ(m.counts, (std::vector<int64_t>{4, 3, 2}));
  ASSERT_EQ(m.tokens.size(), 3u);
  EXPECT_EQ(m.tokens[0].to_vector<int32_t>(), (std::vector<int32_t>{11, 12, 13, 10, 21, 22, 23, 20}));
  EXPECT_EQ(m.targets[0].to_vector<int32_t>(), (std::vector<int32_t>{6, -1, 7, -1, -1, 2, 3, -1}));
  EXPECT_EQ(m.tokens[2].to_vector<int32_t>(), (std::vector<int32_t>{13, 10, 11, 12, 23, 20, 21, 22}));
  EXPECT_EQ(m.targets[2].to_vector<int32_t>(), (std::vector<int32_t>{7, -1, -1, -1, 3, -1, -1, -1}));
}

// Packed rows with isolated samples: each sample is a sequence of its own -- depth k rolls within the sample
// and predicts nothing past its end, so no depth reads or predicts the next sample's tokens. Bad sample
// starts are refused.
TEST(ModelMtp, PackedSamplesShiftWithinThemselves) {
  // Row 0: samples [0, 3) and [3, 7) and padding [7, 8); row 1: one sample over the whole row.
  Tensor x = Tensor::from_vector(
      std::vector<int32_t>{10, 11, 12, 20, 21, 22, 23, 0, 30, 31, 32, 33, 34, 35, 36, 37}, {2, 8});
  Tensor y = Tensor::from_vector(
      std::vector<int32_t>{11, 12, -1, 21, -1, 23, -1, -1, 31, 32, 33, 34, 35, 36, 37, -1}, {2, 8});
  Tensor s =
      Tensor::from_vector(std::vector<int32_t>{0, 0, 0, 3, 3, 3, 3, 7, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 8});
  const MtpBatch m = mtp_batch(x, y, 2, &s);
  EXPECT_EQ(m.counted, 11);
  EXPECT_EQ(m.tokens[0].to_vector<int32_t>(),
            (std::vector<int32_t>{11, 12, 10, 21, 22, 23, 20, 0, 31, 32, 33, 34, 35, 36, 37, 30}));
  EXPECT_EQ(m.targets[0].to_vector<int32_t>(),
            (std::vector<int32_t>{12, -1, -1, -1, 23, -1, -1, -1, 32, 33, 34, 35, 36, 37, -1, -1}));
  EXPECT_EQ(m.tokens[1].to_vector<int32_t>(),
            (std::vector<int32_t>{12, 10, 11, 22, 23, 20, 21, 0, 32, 33, 34, 35, 36, 37, 30, 31}));
  EXPECT_EQ(m.targets[1].to_vector<int32_t>(),
            (std::vector<int32_t>{-1, -1, -1, 23, -1, -1, -1, -1, 33, 34, 35, 36, 37, -1, -1, -1}));
  EXPECT_EQ(m.counts, (std::vector<int64_t>{8, 6}));
  // One sample per row is the unpacked shift.
  Tensor whole = Tensor::from_vector(std::vector<int32_t>(16, 0), {2, 8});
  const MtpBatch plain = mtp_batch(x, y, 2), one = mtp_batch(x, y, 2, &whole);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(one.tokens[k].to_vector<int32_t>(), plain.tokens[k].to_vector<int32_t>());
    EXPECT_EQ(one.targets[k].to_vector<int32_t>(), plain.targets[k].to_vector<int32_t>());
  }
  Tensor bad =
      Tensor::from_vector(std::vector<int32_t>{0, 0, 0, 2, 3, 3, 3, 7, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 8});
  EXPECT_THROW(mtp_batch(x, y, 2, &bad), Error);
}

// TorchTitan's deepseek_v3 flavors, shrunk to toy widths but with their routing and MLA choices, build and
// train a step: the flavor table's settings are ones the model accepts.
TEST(ModelMla, TorchTitanFlavorsBuildARunnableModel) {
  for (const char* flavor : {"16B", "236B", "671B"}) {
    SCOPED_TRACE(flavor);
    const config::Flavor* f = config::find_flavor("deepseek_v3", flavor);
    ASSERT_NE(f, nullptr);
    ModelConfig m = f->model;
    m.num_layers = 2;
    m.hidden_size = 32;
    m.num_attention_heads = m.num_query_groups = 2;
    m.ffn_hidden_size = 48;
    m.vocab_size = m.padded_vocab_size = 50;
    m.mla.q_lora_rank = m.mla.q_lora_rank > 0 ? 8 : 0;
    m.mla.kv_lora_rank = 8;
    m.mla.qk_head_dim = m.mla.qk_pos_emb_head_dim = m.mla.v_head_dim = 4;
    m.moe.num_experts = 16;
    m.moe.ffn_hidden_size = 8;
    m.moe.shared_ffn_hidden_size = 16;
    m.moe.layer_is_moe = {0, 1};
    ParamStore p(ModelSpec::from_config(m));
    p.allocate(DType::kF32, Stream::cpu());
    p.initialize(1, Stream::cpu());
    LlamaModel model(m, {}, p, Stream::cpu(), 8);
    std::vector<int32_t> t(16);
    for (int i = 0; i < 16; ++i) t[i] = (i * 7) % 50;
    Tensor tokens = Tensor::from_vector(t, {2, 8});
    p.grad_flat().zero_(Stream::cpu());
    Tensor losses = model.forward_backward(tokens, tokens, 1.0f / 16, 0.5f);
    for (double v : losses.to_vector<double>()) EXPECT_TRUE(std::isfinite(v));
  }
}
