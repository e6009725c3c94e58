// MoE permute / unpermute on the GPU against the CPU reference: the plan identical (counts, offsets, row map,
// slot map), permuted rows bitwise (padding rows zero), unpermute and both backwards within bf16 tolerance
// and dprobs within f32 tolerance; dropless, dropped entries, padded capacity, zero-token experts, uneven
// loads, odd d (scalar path). Timing rows at the Qwen3-30B-A3B shape (T 4096, E 128, k 8, d 2048), with the
// bandwidth each op reaches against its compulsory bytes.
#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "gpu/fused_test_util.h"
#include "ops/cpu/moe_permute_cpu.h"
#include "ops/cuda/moe_permute_cuda.h"

namespace primus::gputest {
namespace {

using fused::check_true;
using ops::MoePermutePlan;

const char* kFamily = "moe_permute";

// ids [T, k]: k distinct experts per token drawn with a skew (expert x has weight 1/(x+1)^skew over
// [0, hot)); experts >= hot get no token; a fraction of the entries dropped (-1).
Tensor make_ids(Context& ctx, int64_t t, int64_t k, int64_t hot, double skew, double dropped) {
  Tensor ids = Tensor::empty({t, k}, DType::kI32);
  int32_t* p = ids.data<int32_t>();
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> key(hot);
  std::vector<int32_t> order(hot);
  for (int64_t r = 0; r < t; ++r) {
    // Weighted sampling without replacement: the k smallest -log(u) / w.
    for (int64_t x = 0; x < hot; ++x) key[x] = -std::log(u(ctx.rng) + 1e-300) * std::pow(x + 1.0, skew);
    for (int64_t x = 0; x < hot; ++x) order[x] = static_cast<int32_t>(x);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return key[a] < key[b]; });
    for (int64_t j = 0; j < k; ++j) p[r * k + j] = u(ctx.rng) < dropped ? -1 : order[j];
  }
  return ids;
}

bool same_plan(const MoePermutePlan& a, const MoePermutePlan& b) {
  return a.num_rows == b.num_rows && fused::bitwise_equal(a.counts, b.counts) &&
         fused::bitwise_equal(a.offsets, b.offsets) && fused::bitwise_equal(a.row_src, b.row_src) &&
         fused::bitwise_equal(a.slot_row, b.slot_row);
}

void permute_case(Context& ctx, int64_t t, int64_t k, int64_t e, int64_t d, int64_t hot, double skew,
                  double dropped, int64_t capacity, bool timed = false) {
  const std::string name =
      fmt::format("T={} k={} E={} d={} hot={} skew={}{}{}", t, k, e, d, hot, skew,
                  dropped > 0 ? " dropped" : "", capacity > 0 ? fmt::format(" cap={}", capacity) : "");
  Tensor ids = make_ids(ctx, t, k, hot, skew, dropped);
  Tensor ids_g = ids.to(ctx.stream);
  MoePermutePlan plan = ops::cuda::moe_permute_plan(ids_g, e, capacity, ctx.stream);
  MoePermutePlan ref = ops::cpu::moe_permute_plan(ids, e, capacity, Stream::cpu());
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "plan " + name, same_plan(plan, ref),
             "counts, offsets, row and slot maps identical");
  const int64_t n = plan.num_rows;
  const Stream cpu = Stream::cpu();

  // permute: bf16 rows copied bitwise, padding rows zero.
  Tensor x = fused::gpu_randn(ctx, {t, d}, DType::kBF16);
  Tensor x_f = fused::host_f32(ctx, x);
  Tensor xp = ctx.poisoned({n, d}, DType::kBF16);
  ops::cuda::moe_permute(x, plan, xp, ctx.stream);
  Tensor xp_ref = Tensor::empty({n, d}, DType::kF32);
  ops::cpu::moe_permute(x_f, ref, xp_ref, cpu);
  check_true(ctx, kFamily, "permute rows bitwise " + name,
             fused::bitwise_equal(fused::host_f32(ctx, xp), xp_ref));
  if (timed) {
    const double ms = ctx.time_ms([&] { ops::cuda::moe_permute(x, plan, xp, ctx.stream); });
    fused::set_rate(ctx, ms, (t * d + n * d) * 2.0);
    const double pms =
        ctx.time_ms([&] { plan = ops::cuda::moe_permute_plan(ids_g, e, capacity, ctx.stream); });
    ctx.timing(kFamily, "plan " + name, pms, t * k * 12.0 / (pms * 1e-3) / 1e9, "GB/s");
  }

  // unpermute and permute backward (the same k-term gather-sum, with and without probabilities).
  Tensor y = fused::gpu_randn(ctx, {n, d}, DType::kBF16);
  Tensor y_f = fused::host_f32(ctx, y);
  Tensor probs_h = ctx.randn_cpu({t, k}, DType::kF32, 0.3);
  Tensor probs = ctx.to_gpu(probs_h, DType::kF32);
  Tensor out = ctx.poisoned({t, d}, DType::kBF16), out_ref = Tensor::empty({t, d}, DType::kF32);
  ops::cuda::moe_unpermute(y, plan, probs, out, ctx.stream);
  ops::cpu::moe_unpermute(y_f, ref, probs_h, out_ref, cpu);
  ctx.check(kFamily, "unpermute " + name, out, out_ref, kTolBF16);
  if (timed) {
    const double ms = ctx.time_ms([&] { ops::cuda::moe_unpermute(y, plan, probs, out, ctx.stream); });
    fused::set_rate(ctx, ms, (t * d + n * d) * 2.0 + t * k * 8.0);
  }
  Tensor dx = ctx.poisoned({t, d}, DType::kBF16), dx_ref = Tensor::empty({t, d}, DType::kF32);
  ops::cuda::moe_permute_backward(y, plan, dx, ctx.stream);
  ops::cpu::moe_permute_backward(y_f, ref, dx_ref, cpu);
  ctx.check(kFamily, "permute backward " + name, dx, dx_ref, kTolBF16);
  if (timed) {
    const double ms = ctx.time_ms([&] { ops::cuda::moe_permute_backward(y, plan, dx, ctx.stream); });
    fused::set_rate(ctx, ms, (t * d + n * d) * 2.0 + t * k * 4.0);
  }

  // unpermute backward.
  Tensor dout = fused::gpu_randn(ctx, {t, d}, DType::kBF16);
  Tensor dout_f = fused::host_f32(ctx, dout);
  Tensor dy = ctx.poisoned({n, d}, DType::kBF16), dp = ctx.poisoned({t, k}, DType::kF32);
  ops::cuda::moe_unpermute_backward(dout, y, plan, probs, dy, dp, ctx.stream);
  Tensor dy_ref = Tensor::empty({n, d}, DType::kF32), dp_ref = Tensor::empty({t, k}, DType::kF32);
  ops::cpu::moe_unpermute_backward(dout_f, y_f, ref, probs_h, dy_ref, dp_ref, cpu);
  ctx.check(kFamily, "unpermute backward dy_perm " + name, dy, dy_ref, kTolBF16);
  ctx.check(kFamily, "unpermute backward dprobs " + name, dp, dp_ref, kTolF32);
  if (timed) {
    const double ms =
        ctx.time_ms([&] { ops::cuda::moe_unpermute_backward(dout, y, plan, probs, dy, dp, ctx.stream); });
    // dout read (once per copy, mostly from L2: counted once), y_perm read, dy_perm written.
    fused::set_rate(ctx, ms, (t * d + 2 * n * d) * 2.0 + t * k * 8.0);
  }
}

}  // namespace

PRIMUS_GPU_TEST(moe_permute) {
  // Odd sizes, k = 1..8, E not a power of two, zero-token experts (hot < E), skewed loads, odd d.
  permute_case(ctx, 31, 1, 7, 40, 5, 0.0, 0.0, 0);
  permute_case(ctx, 33, 2, 13, 33, 13, 1.0, 0.0, 0);  // odd d: the scalar path
  permute_case(ctx, 127, 8, 60, 256, 40, 1.5, 0.0, 0);
  permute_case(ctx, 127, 3, 61, 72, 61, 0.5, 0.2, 0);  // dropped entries, dropless layout
  permute_case(ctx, 127, 6, 24, 64, 24, 2.0, 0.0, 8);  // padded to capacity, hot experts over capacity
  permute_case(ctx, 33, 4, 9, 24, 6, 0.0, 0.3, 5);
  permute_case(ctx, 1, 8, 128, 2048, 128, 0.0, 0.0, 0);
  if (ctx.quick) return;
  // Qwen3-30B-A3B: T 4096, E 128, k 8, d 2048; balanced and skewed loads; capacity factor 1.25, padded.
  permute_case(ctx, 4096, 8, 128, 2048, 128, 0.0, 0.0, 0, true);
  permute_case(ctx, 4096, 8, 128, 2048, 120, 1.0, 0.0, 0);
  permute_case(ctx, 4096, 8, 128, 2048, 128, 1.0, 0.0, 320, true);
}

}  // namespace primus::gputest
