// MoE router on the GPU against the CPU reference: identical ids for every routing variant (softmax,
// pre-softmax, sigmoid, groups, expert bias, k = 1..8, odd T and E), probabilities and dlogits within f32
// tolerance, aux / sequence-aux / z-loss values and accumulated gradients, the load histogram, the bias
// update and both capacity-drop policies; timing rows at the Qwen3-30B-A3B shape (T 4096, E 128, k 8).
#include <fmt/format.h>

#include <random>

#include "gpu/fused_test_util.h"
#include "ops/cpu/moe_router_cpu.h"
#include "ops/cuda/moe_router_cuda.h"

namespace primus::gputest {
namespace {

using fused::check_true;
using ops::MoeRouterConfig;
using ops::MoeScoreFunction;

const char* kFamily = "moe_router";

std::string cfg_str(int64_t t, int64_t e, const MoeRouterConfig& c, bool bias) {
  return fmt::format("T={} E={} k={} {}{}{}{}{}", t, e, c.topk,
                     c.score == MoeScoreFunction::kSigmoid ? "sigmoid" : "softmax",
                     c.pre_softmax ? " pre" : "", c.normalize ? "" : " unnorm",
                     c.num_groups > 0 ? fmt::format(" groups {}/{}", c.group_topk, c.num_groups) : "",
                     bias ? " bias" : "");
}

void router_case(Context& ctx, int64_t t, int64_t e, const MoeRouterConfig& cfg, bool with_bias,
                 bool timed = false) {
  const std::string name = cfg_str(t, e, cfg, with_bias);
  const int64_t k = cfg.topk;
  Tensor logits = ctx.randn_cpu({t, e}, DType::kF32, 2.0);
  Tensor bias = ctx.randn_cpu({e}, DType::kF32, 0.1);
  Tensor logits_g = ctx.to_gpu(logits, DType::kF32), bias_g = ctx.to_gpu(bias, DType::kF32);
  const Tensor* bias_cpu = with_bias ? &bias : nullptr;
  const Tensor* bias_gpu = with_bias ? &bias_g : nullptr;

  Tensor ids = ctx.poisoned({t, k}, DType::kI32), probs = ctx.poisoned({t, k}, DType::kF32);
  ops::cuda::moe_router_forward(logits_g, bias_gpu, cfg, ids, probs, ctx.stream);
  Tensor ids_ref = Tensor::empty({t, k}, DType::kI32), probs_ref = Tensor::empty({t, k}, DType::kF32);
  ops::cpu::moe_router_forward(logits, bias_cpu, cfg, ids_ref, probs_ref, Stream::cpu());
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "ids " + name, fused::bitwise_equal(ids, ids_ref), "identical ids");
  ctx.check(kFamily, "probs " + name, probs, probs_ref, kTolF32);
  if (timed) {
    const double ms =
        ctx.time_ms([&] { ops::cuda::moe_router_forward(logits_g, bias_gpu, cfg, ids, probs, ctx.stream); });
    fused::set_rate(ctx, ms, t * e * 4.0 + t * k * 8.0);
  }

  Tensor dprobs = ctx.randn_cpu({t, k}, DType::kF32);
  Tensor dprobs_g = ctx.to_gpu(dprobs, DType::kF32);
  Tensor dl = ctx.poisoned({t, e}, DType::kF32);
  ops::cuda::moe_router_backward(logits_g, ids, dprobs_g, cfg, dl, ctx.stream);
  Tensor dl_ref = Tensor::empty({t, e}, DType::kF32);
  ops::cpu::moe_router_backward(logits, ids_ref, dprobs, cfg, dl_ref, Stream::cpu());
  ctx.check(kFamily, "dlogits " + name, dl, dl_ref, kTolF32);
  if (timed) {
    const double ms =
        ctx.time_ms([&] { ops::cuda::moe_router_backward(logits_g, ids, dprobs_g, cfg, dl, ctx.stream); });
    fused::set_rate(ctx, ms, t * e * 8.0 + t * k * 8.0);
  }
}

// The aux loss as training runs it: counts, then the loss from them. chunks > 0: a context-parallel rank's
// layout (2 seqs chunks of t / chunks rows, row r in sequence r % seqs, of whole sequences twice as long).
void loss_case(Context& ctx, int64_t t, int64_t e, int64_t k, MoeScoreFunction score, int64_t seqs,
               int64_t chunks = 0, bool timed = false) {
  const std::string name =
      fmt::format("T={} E={} k={} {} seqs={} chunks={}", t, e, k,
                  score == MoeScoreFunction::kSigmoid ? "sigmoid" : "softmax", seqs, chunks);
  ops::MoeAuxSeqs q;
  q.num_seqs = seqs;
  q.chunk = chunks > 0 ? t / chunks : t / seqs;
  q.seq_tokens = chunks > 0 ? 2 * t / seqs : t / seqs;
  Tensor logits = ctx.randn_cpu({t, e}, DType::kF32, 2.0);
  Tensor base = ctx.randn_cpu({t, e}, DType::kF32, 1e-3);
  Tensor logits_g = ctx.to_gpu(logits, DType::kF32);
  Tensor dl = ctx.to_gpu(base, DType::kF32), loss = ctx.poisoned({1}, DType::kF32);
  Tensor counts = ctx.poisoned({seqs, e}, DType::kI32);
  ops::cuda::moe_aux_counts(logits_g, k, q, counts, ctx.stream);
  ops::cuda::moe_aux_loss_from_counts(logits_g, counts, k, score, q, 1e-2f, 0.5f, loss, &dl, ctx.stream);
  Tensor dl_ref = fused::cpu_copy_f32(ctx, ctx.to_gpu(base, DType::kF32));
  Tensor loss_ref = Tensor::empty({1}, DType::kF32), counts_ref = Tensor::empty({seqs, e}, DType::kI32);
  ops::cpu::moe_aux_counts(logits, k, q, counts_ref, Stream::cpu());
  ops::cpu::moe_aux_loss_from_counts(logits, counts_ref, k, score, q, 1e-2f, 0.5f, loss_ref, &dl_ref,
                                     Stream::cpu());
  ctx.check(kFamily, "aux counts " + name, counts, counts_ref, 0.0);
  ctx.check(kFamily, "aux loss " + name, loss, loss_ref, kTolF32);
  ctx.check(kFamily, "aux dlogits (accumulated) " + name, dl, dl_ref, kTolF32);
  if (timed) {
    const double ms = ctx.time_ms([&] {
      ops::cuda::moe_aux_counts(logits_g, k, q, counts, ctx.stream);
      ops::cuda::moe_aux_loss_from_counts(logits_g, counts, k, score, q, 1e-2f, 0.5f, loss, &dl, ctx.stream);
    });
    fused::set_rate(ctx, ms, t * e * 12.0);
  }
  // z-loss on the same logits (chunks > 0: the mean over the whole sequences' tokens).
  const int64_t mean_over = chunks > 0 ? 2 * t : t;
  Tensor zl = ctx.poisoned({1}, DType::kF32), zd = ctx.to_gpu(base, DType::kF32);
  ops::cuda::moe_z_loss(logits_g, 1e-3f, mean_over, 2.0f, zl, &zd, ctx.stream);
  Tensor zl_ref = Tensor::empty({1}, DType::kF32),
         zd_ref = fused::cpu_copy_f32(ctx, ctx.to_gpu(base, DType::kF32));
  ops::cpu::moe_z_loss(logits, 1e-3f, mean_over, 2.0f, zl_ref, &zd_ref, Stream::cpu());
  ctx.check(kFamily, "z-loss " + name, zl, zl_ref, kTolF32);
  ctx.check(kFamily, "z-loss dlogits (accumulated) " + name, zd, zd_ref, kTolF32);
}

// Histogram, bias update and capacity drop on the ids of a skewed routing (a few experts hot, some never
// chosen).
void load_case(Context& ctx, int64_t t, int64_t e, int64_t k, int64_t capacity) {
  const std::string name = fmt::format("T={} E={} k={} cap={}", t, e, k, capacity);
  Tensor logits = ctx.randn_cpu({t, e}, DType::kF32, 1.0);
  float* lp = logits.data<float>();
  for (int64_t r = 0; r < t; ++r)
    for (int64_t x = 0; x < e; ++x) lp[r * e + x] += x < e / 8 ? 2.0f : x >= e - e / 4 ? -30.0f : 0.0f;
  Tensor logits_g = ctx.to_gpu(logits, DType::kF32);
  MoeRouterConfig cfg;
  cfg.topk = k;
  Tensor ids = Tensor::empty({t, k}, DType::kI32, ctx.stream),
         probs = Tensor::empty({t, k}, DType::kF32, ctx.stream);
  ops::cuda::moe_router_forward(logits_g, nullptr, cfg, ids, probs, ctx.stream);
  stream_sync(ctx.stream);
  Tensor ids_h = ids.to(Stream::cpu()), probs_h = probs.to(Stream::cpu());

  Tensor counts = ctx.poisoned({e}, DType::kI32);
  ops::cuda::moe_expert_load(ids, e, counts, false, ctx.stream);
  ops::cuda::moe_expert_load(ids, e, counts, true, ctx.stream);
  Tensor counts_ref = Tensor::empty({e}, DType::kI32);
  ops::cpu::moe_expert_load(ids_h, e, counts_ref, false, Stream::cpu());
  ops::cpu::moe_expert_load(ids_h, e, counts_ref, true, Stream::cpu());
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "expert load x2 " + name, fused::bitwise_equal(counts, counts_ref));

  Tensor bias = ctx.randn_cpu({e}, DType::kF32, 0.01);
  Tensor bias_g = ctx.to_gpu(bias, DType::kF32);
  ops::cuda::moe_expert_bias_update(counts, 1e-3f, bias_g, ctx.stream);
  ops::cpu::moe_expert_bias_update(counts_ref, 1e-3f, bias, Stream::cpu());
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "bias update " + name, fused::bitwise_equal(bias_g, bias));

  for (auto policy : {ops::MoeDropPolicy::kProbs, ops::MoeDropPolicy::kPosition}) {
    const std::string pn = policy == ops::MoeDropPolicy::kProbs ? " probs" : " position";
    Tensor kid = ctx.poisoned({t, k}, DType::kI32), kp = ctx.poisoned({t, k}, DType::kF32);
    ops::cuda::moe_capacity_drop(ids, probs, e, capacity, policy, kid, kp, ctx.stream);
    Tensor kid_ref = Tensor::empty({t, k}, DType::kI32), kp_ref = Tensor::empty({t, k}, DType::kF32);
    ops::cpu::moe_capacity_drop(ids_h, probs_h, e, capacity, policy, kid_ref, kp_ref, Stream::cpu());
    stream_sync(ctx.stream);
    check_true(ctx, kFamily, "capacity drop ids" + pn + " " + name, fused::bitwise_equal(kid, kid_ref));
    check_true(ctx, kFamily, "capacity drop probs" + pn + " " + name, fused::bitwise_equal(kp, kp_ref));
  }
}

MoeRouterConfig cfg_of(int64_t k, MoeScoreFunction score, bool pre = false, bool normalize = true,
                       int64_t groups = 0, int64_t group_topk = 0, float scale = 1.0f) {
  MoeRouterConfig c;
  c.topk = k;
  c.score = score;
  c.pre_softmax = pre;
  c.normalize = normalize;
  c.num_groups = groups;
  c.group_topk = group_topk;
  c.scaling_factor = scale;
  return c;
}

}  // namespace

PRIMUS_GPU_TEST(moe_router) {
  const auto sm = MoeScoreFunction::kSoftmax, sg = MoeScoreFunction::kSigmoid;
  // Odd sizes, every probability kind, k = 1..8, E not a power of two.
  for (int64_t t : {31, 33, 127}) {
    for (int64_t k : {1, 2, 3, 8}) {
      router_case(ctx, t, 60, cfg_of(k, sm), false);
      router_case(ctx, t, 61, cfg_of(k, sm, true, false), t == 33);
      router_case(ctx, t, 257, cfg_of(k, sg, false, true, 0, 0, 2.5f), true);
      router_case(ctx, t, 13, cfg_of(k, sg, false, false), k == 3);
    }
  }
  router_case(ctx, 127, 128, cfg_of(5, sm, true, true), false);
  // Group-limited: DeepSeek-V3 (256 experts, 8 groups, top-4 groups, k 8, sigmoid + bias, scale 2.5) and
  // DeepSeek-V2-like softmax groups with the max as group score.
  router_case(ctx, 127, 256, cfg_of(8, sg, false, true, 8, 4, 2.5f), true);
  router_case(ctx, 33, 160, cfg_of(6, sm, true, false, 8, 3), false);
  router_case(ctx, 31, 72, cfg_of(4, sm, false, true, 6, 4), true);
  // Ties everywhere: all-equal logits (the lower id wins on both devices).
  {
    MoeRouterConfig c = cfg_of(8, sg, false, true, 8, 4);
    Tensor logits = Tensor::zeros({17, 64}, DType::kF32);
    Tensor lg = ctx.to_gpu(logits, DType::kF32);
    Tensor ids = ctx.poisoned({17, 8}, DType::kI32), probs = ctx.poisoned({17, 8}, DType::kF32);
    ops::cuda::moe_router_forward(lg, nullptr, c, ids, probs, ctx.stream);
    Tensor ids_ref = Tensor::empty({17, 8}, DType::kI32), probs_ref = Tensor::empty({17, 8}, DType::kF32);
    ops::cpu::moe_router_forward(logits, nullptr, c, ids_ref, probs_ref, Stream::cpu());
    stream_sync(ctx.stream);
    check_true(ctx, kFamily, "ids all-equal logits T=17 E=64 k=8 groups 4/8",
               fused::bitwise_equal(ids, ids_ref));
  }
  // Losses: switch (one micro-batch) and per-sequence aux loss, z-loss.
  loss_case(ctx, 33, 60, 2, sm, 1);
  loss_case(ctx, 127, 257, 8, sg, 1);
  loss_case(ctx, 93, 13, 3, sm, 3);
  loss_case(ctx, 128, 128, 8, sg, 4);
  loss_case(ctx, 120, 60, 4, sm, 3, 6);  // a context-parallel rank's chunks (CP layout)
  loss_case(ctx, 124, 31, 2, sg, 1, 4);
  // Loads, bias update, capacity (uneven loads, experts with zero tokens).
  load_case(ctx, 127, 24, 2, 9);
  load_case(ctx, 1000, 60, 6, ops::moe_expert_capacity(1000, 6, 60, 1.0));
  if (ctx.quick) return;
  // Qwen3-30B-A3B shape: T 4096, E 128, k 8, softmax + norm_topk_prob; DeepSeek-V3 routing at T 4096.
  router_case(ctx, 4096, 128, cfg_of(8, sm), false, true);
  router_case(ctx, 4096, 256, cfg_of(8, sg, false, true, 8, 4, 2.5f), true, true);
  loss_case(ctx, 4096, 128, 8, sm, 1, 0, true);
  load_case(ctx, 4096, 128, 8, ops::moe_expert_capacity(4096, 8, 128, 1.25));
}

}  // namespace primus::gputest
