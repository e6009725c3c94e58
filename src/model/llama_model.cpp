#include "model/llama_model.h"

#include "ops/embedding.h"

namespace primus {

std::vector<RecomputeMode> recompute_plan(const RecomputeConfig& cfg, int64_t num_layers) {
  std::vector<RecomputeMode> plan(static_cast<size_t>(num_layers), RecomputeMode::kNone);
  if (cfg.granularity.empty() || cfg.granularity == "none") return plan;
  if (cfg.granularity == "selective") {
    std::fill(plan.begin(), plan.end(), RecomputeMode::kSelective);
    return plan;
  }
  PRIMUS_CHECK(cfg.granularity == "full", "recompute_granularity '{}' (expected full or selective)",
               cfg.granularity);
  if (cfg.method == "block") {
    // Megatron "block": the first recompute_num_layers layers recompute fully, the rest keep activations.
    for (int64_t l = 0; l < std::min<int64_t>(cfg.num_layers, num_layers); ++l)
      plan[l] = RecomputeMode::kFull;
  } else {
    // "uniform" (and the default): every layer keeps only its input. Megatron checkpoints every
    // recompute_num_layers-th boundary; checkpointing each boundary costs the same compute and one d-wide
    // tensor per layer more memory, and keeps the per-layer schedule simple.
    std::fill(plan.begin(), plan.end(), RecomputeMode::kFull);
  }
  return plan;
}

ops::RopeConfig rope_config(const ModelConfig& m) {
  ops::RopeConfig r;
  r.theta = m.rotary_base;
  r.llama3_scaling = m.use_rope_scaling;
  r.factor = m.rope_scaling_factor;
  r.low_freq_factor = m.rope_low_freq_factor;
  r.high_freq_factor = m.rope_high_freq_factor;
  r.original_max_position = m.rope_original_max_position;
  return r;
}

LlamaModel::LlamaModel(const ModelConfig& cfg, const RecomputeConfig& recompute, ParamStore& params,
                       const Stream& stream, int64_t max_seq)
    : cfg_(cfg),
      spec_(ModelSpec::from_config(cfg)),
      params_(params),
      stream_(stream),
      act_dtype_(stream.device.is_cpu() ? params.compute_flat().dtype() : DType::kBF16),
      head_(spec_, params) {
  rope_table_ = ops::rope_table(rope_config(cfg), max_seq, spec_.head_dim).to(stream);
  for (int l = 0; l < spec_.layers; ++l) layers_.push_back(std::make_unique<DecoderLayer>(spec_, params, l));
  recompute_ = recompute_plan(recompute, spec_.layers);
  embed_ = params.find("embed_tokens.weight");
}

StepContext LlamaModel::context(const Tensor& tokens) const {
  PRIMUS_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::kI32, "tokens must be i32 [B, T], got {}",
               tokens.describe());
  StepContext ctx;
  ctx.stream = stream_;
  ctx.act_dtype = act_dtype_;
  ctx.batch = tokens.size(0);
  ctx.seq = tokens.size(1);
  ctx.rope_table = &rope_table_;
  PRIMUS_CHECK(ctx.seq <= rope_table_.size(0), "sequence length {} exceeds the rope table ({})", ctx.seq,
               rope_table_.size(0));
  return ctx;
}

Tensor LlamaModel::forward_backward(const Tensor& tokens, const Tensor& targets, float grad_scale,
                                    float aux_grad_scale) {
  StepContext ctx = context(tokens);
  ctx.aux_grad_scale = aux_grad_scale;
  const int64_t n = ctx.tokens();
  const int head_region = static_cast<int>(layers_.size()) + 1;
  auto hook = [&](void (ParamHooks::*f)(int), int region) {
    if (hooks_) (hooks_->*f)(region);
  };
  Tensor flat_tokens = tokens.view({n});
  Tensor x = ctx.act({n, spec_.hidden});
  hook(&ParamHooks::before_forward, 0);
  if (!(hooks_ && hooks_->embedding_forward(flat_tokens, x)))
    ops::embedding_forward(flat_tokens, params_.param(embed_), x, ctx.stream);
  hook(&ParamHooks::after_forward, 0);

  std::vector<LayerActivations> slots(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    hook(&ParamHooks::before_forward, static_cast<int>(l) + 1);
    x = layers_[l]->forward(ctx, x, &slots[l], recompute_[l], /*record_stats=*/true);
    hook(&ParamHooks::after_forward, static_cast<int>(l) + 1);
  }

  Tensor losses = ctx.empty({n}, ctx.stat_dtype());
  Tensor dx;
  hook(&ParamHooks::before_forward, head_region);
  head_.run(ctx, x, targets.view({n}), grad_scale, losses, &dx);
  hook(&ParamHooks::after_backward, head_region);
  x = Tensor();
  for (size_t l = layers_.size(); l-- > 0;) {
    hook(&ParamHooks::before_backward, static_cast<int>(l) + 1);
    dx = layers_[l]->backward(ctx, dx, slots[l]);
    hook(&ParamHooks::after_backward, static_cast<int>(l) + 1);
  }

  hook(&ParamHooks::before_backward, 0);
  Tensor g_embed = params_.grad(embed_);
  ops::embedding_backward(flat_tokens, dx, g_embed, ctx.stream);
  hook(&ParamHooks::after_backward, 0);
  return losses;
}

void LlamaModel::end_step() {
  for (auto& layer : layers_)
    if (MoeMlp* m = layer->moe()) m->end_step(stream_);
}

std::vector<MoeLayerStats> LlamaModel::take_moe_stats() {
  std::vector<MoeLayerStats> out;
  for (auto& layer : layers_)
    if (MoeMlp* m = layer->moe()) out.push_back(m->take_stats(stream_));
  return out;
}

double LlamaModel::moe_losses_of_last_forward() {
  double sum = 0;
  for (auto& layer : layers_)
    if (MoeMlp* m = layer->moe()) sum += m->last_losses(stream_);
  return sum;
}

std::vector<int> LlamaModel::gemm_written_grad_entries() const {
  std::vector<int> out;
  for (const auto& layer : layers_)
    for (int i : layer->gemm_weight_entries()) out.push_back(i);
  out.push_back(head_.weight_entry());
  return out;
}

Tensor LlamaModel::forward_loss(const Tensor& tokens, const Tensor& targets) {
  StepContext ctx = context(tokens);
  const int64_t n = ctx.tokens();
  const int head_region = static_cast<int>(layers_.size()) + 1;
  Tensor flat_tokens = tokens.view({n});
  Tensor x = ctx.act({n, spec_.hidden});
  if (hooks_) hooks_->before_forward(0);
  if (!(hooks_ && hooks_->embedding_forward(flat_tokens, x)))
    ops::embedding_forward(flat_tokens, params_.param(embed_), x, ctx.stream);
  if (hooks_) hooks_->after_forward(0);
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (hooks_) hooks_->before_forward(static_cast<int>(l) + 1);
    x = layers_[l]->forward(ctx, x, nullptr, RecomputeMode::kNone);
    if (hooks_) hooks_->after_forward(static_cast<int>(l) + 1);
  }
  Tensor losses = ctx.empty({n}, ctx.stat_dtype());
  if (hooks_) hooks_->before_forward(head_region);
  head_.run(ctx, x, targets.view({n}), 1.0f, losses, nullptr);
  if (hooks_) hooks_->after_forward(head_region);
  return losses;
}

}  // namespace primus
