#pragma once
// Shared by the whole-model gradient tests (model_grad_test.cpp, model_moe_grad_test.cpp): a tiny model in
// f64 on the CPU reference ops, and the check of its explicit backward against central finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "model/llama_model.h"

namespace primus::grad_test {

inline ModelConfig tiny_model(bool qk_norm, bool qkv_bias, bool tied) {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 16;
  m.ffn_hidden_size = 24;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;
  m.kv_channels = 4;
  m.vocab_size = m.padded_vocab_size = 23;
  m.qk_layernorm = qk_norm;
  m.add_qkv_bias = qkv_bias;
  m.untie_embeddings_and_output_weights = !tied;
  m.rotary_base = 10000;
  m.use_rope_scaling = true;  // exercise the scaled frequencies too
  m.rope_original_max_position = 4;
  m.init_method_std = 0.3;  // large enough that every path carries signal
  return m;
}

// The tiny model with DeepSeek-style multi-latent attention (one kv head per q head, YaRN on a short context
// so that the ramp carries signal).
inline ModelConfig tiny_mla(int64_t q_lora, bool tied) {
  ModelConfig m = tiny_model(/*qk_norm=*/true, /*qkv_bias=*/false, tied);
  m.use_rope_scaling = false;
  m.num_query_groups = m.num_attention_heads;
  MlaConfig& a = m.mla;
  a.enabled = true;
  a.q_lora_rank = q_lora;
  a.kv_lora_rank = 5;
  a.qk_head_dim = 3;
  a.qk_pos_emb_head_dim = 4;
  a.v_head_dim = 3;
  a.yarn = true;  // a short original context so that the ramp and the scaled cos/sin carry signal
  a.rotary_scaling_factor = 4.0;
  a.original_max_position = 4;
  a.beta_fast = 4.0;
  a.beta_slow = 1.0;
  a.mscale = 1.0;
  a.mscale_all_dim = 0.5;
  return m;
}

struct Fixture {
  ModelConfig cfg;
  ParamStore params;
  LlamaModel model;
  Tensor tokens, targets;
  Fixture(const ModelConfig& c, const RecomputeConfig& rc, uint64_t seed)
      : cfg(c), params(ModelSpec::from_config(c)), model(c, rc, alloc(params, seed), Stream::cpu(), 8) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
    std::vector<int32_t> t(2 * 7), y(2 * 7);
    for (auto& v : t) v = tok(rng);
    for (auto& v : y) v = tok(rng);
    y[3] = -1;  // one ignored target
    tokens = Tensor::from_vector(t, {2, 7});
    targets = Tensor::from_vector(y, {2, 7});
  }
  static ParamStore& alloc(ParamStore& p, uint64_t seed) {
    p.allocate(DType::kF64, Stream::cpu(), DType::kF64);
    p.initialize(seed, Stream::cpu());
    // Norm weights start at 1 and biases at 0; perturb them so their gradients are generic.
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> nd(0.0, 0.2);
    for (const auto& e : p.entries()) {
      if (e.decay) continue;
      double* w = p.master(p.find(e.name)).data<double>();
      for (int64_t j = 0; j < e.numel; ++j) w[j] += nd(rng);
    }
    return p;
  }
  // Sum of the per-token losses, plus the MoE balancing losses of the same forward (each weighted 1, as
  // forward_backward(..., aux_grad_scale = 1) differentiates them).
  double loss() {
    Tensor l = model.forward_loss(tokens, targets);
    double s = 0;
    for (double v : l.to_vector<double>()) s += v;
    return s + model.moe_losses_of_last_forward();
  }
};

// The analytic gradients in `p` (f64 masters, grad(i) filled) against central finite differences of `loss` at
// `samples` random elements of each entry (skip(name): entries without a gradient): per entry the relative
// error over its samples must be below 1e-6, and some signal must reach it. Returns the elements checked.
template <typename Loss, typename Skip>
int check_store_gradients(ParamStore& p, Loss&& loss, int samples, uint32_t seed, Skip&& skip) {
  std::mt19937 rng(seed);
  const double eps = 1e-6;
  int checked = 0;
  for (const auto& e : p.entries()) {
    if (skip(e.name)) continue;
    double* w = p.master(p.find(e.name)).data<double>();
    const double* g = p.grad(p.find(e.name)).data<double>();
    std::uniform_int_distribution<int64_t> pick(0, e.numel - 1);
    double num = 0, den = 0;
    for (int k = 0; k < samples; ++k) {
      const int64_t j = pick(rng);
      const double orig = w[j];
      w[j] = orig + eps;
      const double lp = loss();
      w[j] = orig - eps;
      const double lm = loss();
      w[j] = orig;
      const double fd = (lp - lm) / (2 * eps);
      num += (fd - g[j]) * (fd - g[j]);
      den += fd * fd;
      ++checked;
    }
    EXPECT_GT(den, 0.0) << e.name << " gets no gradient";
    EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-6) << e.name;
  }
  return checked;
}
template <typename Loss>
int check_store_gradients(ParamStore& p, Loss&& loss, int samples, uint32_t seed) {
  return check_store_gradients(p, std::forward<Loss>(loss), samples, seed,
                               [](const std::string&) { return false; });
}

inline void check_gradients(const ModelConfig& c, const RecomputeConfig& rc) {
  Fixture f(c, rc, 42);
  f.params.grad_flat().zero_(Stream::cpu());
  Tensor losses = f.model.forward_backward(f.tokens, f.targets, 1.0f, /*aux_grad_scale=*/1.0f);
  double analytic_loss = f.model.moe_losses_of_last_forward();
  for (double v : losses.to_vector<double>()) analytic_loss += v;
  EXPECT_NEAR(analytic_loss, f.loss(), 1e-12 * std::abs(analytic_loss));

  // (the MoE expert bias steers selection only: no gradient)
  const int checked = check_store_gradients(
      f.params, [&] { return f.loss(); }, 12, 7,
      [](const std::string& n) { return n.find("expert_bias") != std::string::npos; });
  EXPECT_GT(checked, 100);
}

}  // namespace primus::grad_test
