// Forced MoE load balancing on the GPU against the CPU reference (ops/moe_router.h): the random router logits
// bitwise (core/portable_normal.h), and the ids the router picks from them bitwise; the round-robin ids and
// the descending (id, prob) reordering bitwise (k = 1..32, ties, in place); the router probabilities of given
// ids within f32 tolerance for every probability kind, and bitwise the forward's own for its ids. Odd T and
// E, E not a multiple of k; timing rows at the Qwen3-30B-A3B shape (T 4096, E 128, k 8).
#include <fmt/format.h>

#include "gpu/fused_test_util.h"
#include "ops/cpu/moe_router_cpu.h"
#include "ops/cuda/moe_router_cuda.h"

namespace primus::gputest {
namespace {

using fused::check_true;
using ops::MoeRandomLogitsKey;
using ops::MoeRouterConfig;
using ops::MoeScoreFunction;

const char* kFamily = "moe_force_balance";

MoeRouterConfig cfg_of(int64_t k, MoeScoreFunction score, bool pre = false, bool normalize = true,
                       float scale = 1.0f) {
  MoeRouterConfig c;
  c.topk = k;
  c.score = score;
  c.pre_softmax = pre;
  c.normalize = normalize;
  c.scaling_factor = scale;
  return c;
}

// Random logits of T tokens (sequences of `seq`) and the routing "uniform" derives from them.
void random_logits_case(Context& ctx, int64_t t, int64_t e, int64_t seq, int64_t k, bool timed = false) {
  MoeRandomLogitsKey key;
  key.stream = ctx.rng();
  key.first_sample = static_cast<int64_t>(ctx.rng() % 100000);
  key.seq_len = seq;
  key.pos_offset = static_cast<int64_t>(ctx.rng() % 7);
  const std::string name = fmt::format("T={} E={} seq={} sample={}", t, e, seq, key.first_sample);
  Tensor g = ctx.poisoned({t, e}, DType::kF32);
  ops::cuda::moe_random_logits(key, g, ctx.stream);
  Tensor ref = Tensor::empty({t, e}, DType::kF32);
  ops::cpu::moe_random_logits(key, ref, Stream::cpu());
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "random logits " + name, fused::bitwise_equal(g, ref), "bitwise");
  if (timed) {
    const double ms = ctx.time_ms([&] { ops::cuda::moe_random_logits(key, g, ctx.stream); });
    fused::set_rate(ctx, ms, t * e * 4.0);
  }
  // Routed by the router (softmax top-k): the same ids on both devices.
  const MoeRouterConfig cfg = cfg_of(k, MoeScoreFunction::kSoftmax);
  Tensor ids = ctx.poisoned({t, k}, DType::kI32), probs = ctx.poisoned({t, k}, DType::kF32);
  ops::cuda::moe_router_forward(g, nullptr, cfg, ids, probs, ctx.stream);
  Tensor ids_ref = Tensor::empty({t, k}, DType::kI32), probs_ref = Tensor::empty({t, k}, DType::kF32);
  ops::cpu::moe_router_forward(ref, nullptr, cfg, ids_ref, probs_ref, Stream::cpu());
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, fmt::format("uniform routing ids k={} {}", k, name),
             fused::bitwise_equal(ids, ids_ref));
}

void round_robin_case(Context& ctx, int64_t t, int64_t k, int64_t e, int64_t seqs) {
  const std::string name = fmt::format("T={} k={} E={} seqs={}", t, k, e, seqs);
  Tensor g = ctx.poisoned({t, k}, DType::kI32);
  ops::cuda::moe_round_robin_ids(e, seqs, g, ctx.stream);
  Tensor ref = Tensor::empty({t, k}, DType::kI32);
  ops::cpu::moe_round_robin_ids(e, seqs, ref, Stream::cpu());
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "round-robin ids " + name, fused::bitwise_equal(g, ref));
}

void sort_case(Context& ctx, int64_t t, int64_t k, bool ties, bool timed = false) {
  const std::string name = fmt::format("T={} k={}{}", t, k, ties ? " ties" : "");
  Tensor p = ctx.randn_cpu({t, k}, DType::kF32);
  if (ties) {  // a few levels only: many equal probabilities, whose order must be kept
    float* v = p.data<float>();
    for (int64_t i = 0; i < t * k; ++i) v[i] = static_cast<float>(static_cast<int>(v[i] * 2.0f)) * 0.25f;
  }
  Tensor ids = ctx.randint_cpu({t, k}, 1 << 20);
  Tensor pg = ctx.to_gpu(p, DType::kF32), ig = ctx.to_gpu(ids, DType::kI32);
  Tensor sid = ctx.poisoned({t, k}, DType::kI32), sp = ctx.poisoned({t, k}, DType::kF32);
  ops::cuda::moe_sort_by_prob(ig, pg, sid, sp, ctx.stream);
  Tensor sid_ref = Tensor::empty({t, k}, DType::kI32), sp_ref = Tensor::empty({t, k}, DType::kF32);
  ops::cpu::moe_sort_by_prob(ids, p, sid_ref, sp_ref, Stream::cpu());
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "sorted ids " + name, fused::bitwise_equal(sid, sid_ref));
  check_true(ctx, kFamily, "sorted probs " + name, fused::bitwise_equal(sp, sp_ref));
  if (timed) {
    const double ms = ctx.time_ms([&] { ops::cuda::moe_sort_by_prob(ig, pg, sid, sp, ctx.stream); });
    fused::set_rate(ctx, ms, t * k * 16.0);
  }
  ops::cuda::moe_sort_by_prob(ig, pg, ig, pg, ctx.stream);  // in place
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "sorted in place " + name,
             fused::bitwise_equal(ig, sid_ref) && fused::bitwise_equal(pg, sp_ref));
}

void router_probs_case(Context& ctx, int64_t t, int64_t e, const MoeRouterConfig& cfg, bool timed = false) {
  const int64_t k = cfg.topk;
  const std::string name = fmt::format("T={} E={} k={} {}{}{}", t, e, k,
                                       cfg.score == MoeScoreFunction::kSigmoid ? "sigmoid" : "softmax",
                                       cfg.pre_softmax ? " pre" : "", cfg.normalize ? "" : " unnorm");
  Tensor logits = ctx.randn_cpu({t, e}, DType::kF32, 2.0);
  Tensor lg = ctx.to_gpu(logits, DType::kF32);
  // TorchTitan's round-robin experts (batch-major).
  Tensor ids = Tensor::empty({t, k}, DType::kI32);
  ops::cpu::moe_round_robin_ids(e, 1, ids, Stream::cpu());
  Tensor ig = ctx.to_gpu(ids, DType::kI32);
  Tensor pg = ctx.poisoned({t, k}, DType::kF32);
  ops::cuda::moe_router_probs(lg, ig, cfg, pg, ctx.stream);
  Tensor p_ref = Tensor::empty({t, k}, DType::kF32);
  ops::cpu::moe_router_probs(logits, ids, cfg, p_ref, Stream::cpu());
  ctx.check(kFamily, "router probs of round-robin ids " + name, pg, p_ref, kTolF32);
  if (timed) {
    const double ms = ctx.time_ms([&] { ops::cuda::moe_router_probs(lg, ig, cfg, pg, ctx.stream); });
    fused::set_rate(ctx, ms, t * e * 4.0 + t * k * 8.0);
  }
  // For the forward's own ids: bitwise the forward's probabilities.
  Tensor fid = ctx.poisoned({t, k}, DType::kI32), fp = ctx.poisoned({t, k}, DType::kF32);
  ops::cuda::moe_router_forward(lg, nullptr, cfg, fid, fp, ctx.stream);
  Tensor again = ctx.poisoned({t, k}, DType::kF32);
  ops::cuda::moe_router_probs(lg, fid, cfg, again, ctx.stream);
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "router probs of the forward's ids " + name, fused::bitwise_equal(again, fp));
}

}  // namespace

PRIMUS_GPU_TEST(moe_force_balance) {
  const auto sm = MoeScoreFunction::kSoftmax, sg = MoeScoreFunction::kSigmoid;
  for (int64_t t : {31, 33, 127}) {
    random_logits_case(ctx, t, 13, t == 127 ? 127 : 1, 3);
    random_logits_case(ctx, t, 60, 1, 8);
    random_logits_case(ctx, t, 257, t, 2);
    for (int64_t k : {1, 3, 8}) {
      round_robin_case(ctx, t, k, 13, 1);
      round_robin_case(ctx, t, k, 60, t);
      sort_case(ctx, t, k, false);
      sort_case(ctx, t, k, true);
      router_probs_case(ctx, t, 13, cfg_of(k, sm));
      router_probs_case(ctx, t, 61, cfg_of(k, sm, true, false));
      router_probs_case(ctx, t, 60, cfg_of(k, sm, true, true, 2.5f));
      router_probs_case(ctx, t, 257, cfg_of(k, sg, false, true, 2.5f));
      router_probs_case(ctx, t, 13, cfg_of(k, sg, false, false));
    }
  }
  round_robin_case(ctx, 128, 8, 128, 4);  // Megatron's sequence-major order over 4 sequences
  sort_case(ctx, 33, 32, true);           // the CUDA sort's largest k
  if (ctx.quick) return;
  // Qwen3-30B-A3B shape: T 4096 (one sequence of 4096), E 128, k 8.
  random_logits_case(ctx, 4096, 128, 4096, 8, true);
  sort_case(ctx, 4096, 8, false, true);
  router_probs_case(ctx, 4096, 128, cfg_of(8, sm), true);
}

}  // namespace primus::gputest
