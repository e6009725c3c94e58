// Grouped GEMM on the GPU (each path of ops/cuda/grouped_gemm_cuda.h) against the CPU reference on the same
// bf16-rounded inputs: uneven loads, zero-token experts, padding rows, odd sizes, NaN-poisoned outputs (so an
// unwritten row or expert block fails), wgrad overwrite and accumulate. Timing rows: the Qwen3-30B-A3B expert
// shape with uneven loads per path.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gpu/fused_test_util.h"
#include "ops/cpu/grouped_gemm_cpu.h"
#include "ops/cuda/grouped_gemm_cuda.h"

namespace primus::gputest {
namespace {

using fused::gpu_randn;
using ops::cuda::GroupedGemmPath;
constexpr const char* kFam = "grouped_gemm";

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// Counts of `tokens` rows over `experts` experts with a skewed load (some experts get none): a random
// Dirichlet-like split, so each run sees fresh uneven loads.
std::vector<int64_t> uneven_counts(Context& ctx, int64_t experts, int64_t tokens, int zero_experts) {
  std::vector<double> share(static_cast<size_t>(experts));
  std::exponential_distribution<double> ex(1.0);
  for (double& s : share) s = std::pow(ex(ctx.rng), 2.0);
  for (int z = 0; z < zero_experts; ++z) share[ctx.rng() % experts] = 0.0;
  const double total = std::accumulate(share.begin(), share.end(), 0.0);
  std::vector<int64_t> c(static_cast<size_t>(experts), 0);
  int64_t given = 0;
  for (int64_t e = 0; e < experts; ++e) {
    c[e] = static_cast<int64_t>(std::floor(share[e] / total * static_cast<double>(tokens)));
    given += c[e];
  }
  for (int64_t e = 0; given < tokens; e = (e + 1) % experts)
    if (share[e] > 0.0) c[e]++, given++;
  return c;
}

// Whether every element of experts' blocks with count 0 equals `want` (bitwise, on the host).
bool empty_experts_equal(Context& ctx, const Tensor& dw, const std::vector<int64_t>& counts,
                         const Tensor& want) {
  const Tensor got = fused::host_f32(ctx, dw);
  const int64_t block = dw.size(1) * dw.size(2);
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] != 0) continue;
    for (int64_t i = static_cast<int64_t>(e) * block; i < static_cast<int64_t>(e + 1) * block; ++i)
      if (std::memcmp(&g[i], &w[i], sizeof(float)) != 0) return false;
  }
  return true;
}

void check_case(Context& ctx, GroupedGemmPath path, const std::vector<int64_t>& counts, int64_t padding,
                int64_t n, int64_t k) {
  ops::cuda::set_grouped_gemm_path(path);
  const int64_t experts = static_cast<int64_t>(counts.size()), rows = sum(counts) + padding;
  const std::string sz =
      fmt::format("{} counts=[{}]+{} N={} K={}", ops::cuda::grouped_gemm_path_name(path),
                  counts.size() <= 8 ? fmt::format("{}", fmt::join(counts, ",")) : "uneven", padding, n, k);
  Tensor x = gpu_randn(ctx, {rows, k}, DType::kBF16), w = gpu_randn(ctx, {experts, n, k}, DType::kBF16, 0.1);
  Tensor dy = gpu_randn(ctx, {rows, n}, DType::kBF16);
  Tensor xf = fused::host_f32(ctx, x), wf = fused::host_f32(ctx, w), dyf = fused::host_f32(ctx, dy);

  Tensor y = ctx.poisoned({rows, n}, DType::kBF16);
  ops::cuda::grouped_gemm_forward(x, w, counts, y, ctx.stream);
  Tensor y_ref = Tensor::empty({rows, n}, DType::kF32);
  ops::cpu::grouped_gemm_forward(xf, wf, counts, y_ref, Stream::cpu());
  ctx.check(kFam, "fwd " + sz, y, y_ref, kTolBF16,
            fmt::format("ran {}", ops::cuda::grouped_gemm_path_name(ops::cuda::last_grouped_gemm_path())));

  Tensor dx = ctx.poisoned({rows, k}, DType::kBF16);
  ops::cuda::grouped_gemm_backward_input(dy, w, counts, dx, ctx.stream);
  Tensor dx_ref = Tensor::empty({rows, k}, DType::kF32);
  ops::cpu::grouped_gemm_backward_input(dyf, wf, counts, dx_ref, Stream::cpu());
  ctx.check(kFam, "dgrad " + sz, dx, dx_ref, kTolBF16);

  // Overwrite into a NaN-poisoned gradient: every expert block, empty ones included, must come back defined.
  Tensor dw = ctx.poisoned({experts, n, k}, DType::kF32);
  ops::cuda::grouped_gemm_backward_weight(dy, x, counts, dw, ctx.stream, /*accumulate=*/false);
  Tensor dw_ref = Tensor::empty({experts, n, k}, DType::kF32);
  ops::cpu::grouped_gemm_backward_weight(dyf, xf, counts, dw_ref, Stream::cpu(), false);
  ctx.check(kFam, "wgrad " + sz, dw, dw_ref, kTolF32 * 10,
            fmt::format("ran {}", ops::cuda::grouped_gemm_path_name(ops::cuda::last_grouped_gemm_path())));

  // Accumulate onto a prior gradient: empty experts keep it bit for bit.
  Tensor prior = gpu_randn(ctx, {experts, n, k}, DType::kF32);
  Tensor prior_h = fused::host_f32(ctx, prior);
  ops::cuda::grouped_gemm_backward_weight(dy, x, counts, prior, ctx.stream, /*accumulate=*/true);
  ops::cpu::grouped_gemm_backward_weight(dyf, xf, counts, prior_h, Stream::cpu(), true);
  ctx.check(kFam, "wgrad accumulate " + sz, prior, prior_h, kTolF32 * 10);
  fused::check_true(ctx, kFam, "wgrad accumulate keeps empty experts " + sz,
                    empty_experts_equal(ctx, prior, counts, prior_h));
}

bool all_finite(Context& ctx, const Tensor& t) {
  const Tensor h = fused::host_f32(ctx, t);
  const float* p = h.data<float>();
  return std::all_of(p, p + h.numel(), [](float v) { return std::isfinite(v); });
}

// Times the three ops of one shape on uneven loads; checks the first experts' rows against the CPU first
// (never timing garbage), then records TFLOP/s (useful FLOPs 2 * rows * N * K).
void timed_case(Context& ctx, GroupedGemmPath path, int64_t experts, int64_t tokens, int64_t n, int64_t k) {
  ops::cuda::set_grouped_gemm_path(path);
  const std::vector<int64_t> counts = uneven_counts(ctx, experts, tokens, 2);
  const std::string sz = fmt::format("{} E={} T={} uneven N={} K={}", ops::cuda::grouped_gemm_path_name(path),
                                     experts, tokens, n, k);
  Tensor x = gpu_randn(ctx, {tokens, k}, DType::kBF16),
         w = gpu_randn(ctx, {experts, n, k}, DType::kBF16, 0.05);
  Tensor dy = gpu_randn(ctx, {tokens, n}, DType::kBF16);
  Tensor y = ctx.poisoned({tokens, n}, DType::kBF16), dx = ctx.poisoned({tokens, k}, DType::kBF16);
  Tensor dw = ctx.poisoned({experts, n, k}, DType::kF32);
  ops::cuda::grouped_gemm_forward(x, w, counts, y, ctx.stream);
  // Reference for the rows of the first three experts (sliced inputs, same counts prefix).
  const std::vector<int64_t> head(counts.begin(), counts.begin() + 3);
  const int64_t hr = sum(head);
  Tensor xh = fused::host_f32(ctx, x.slice(0, hr)), wh = fused::host_f32(ctx, w.slice(0, 3));
  Tensor yh_ref = Tensor::empty({hr, n}, DType::kF32);
  ops::cpu::grouped_gemm_forward(xh, wh, head, yh_ref, Stream::cpu());
  ctx.check(kFam, "fwd first experts " + sz, fused::host_f32(ctx, y.slice(0, hr)), yh_ref, kTolBF16);
  const double flops = 2.0 * static_cast<double>(tokens) * n * k;
  auto rate = [&](double ms) {
    CaseResult& r = ctx.results.back();
    r.gpu_ms = ms;
    r.gbps_or_tflops = flops / (ms * 1e-3) / 1e12;
    r.rate_unit = "TFLOP/s";
  };
  rate(ctx.time_ms([&] { ops::cuda::grouped_gemm_forward(x, w, counts, y, ctx.stream); }));
  ops::cuda::grouped_gemm_backward_input(dy, w, counts, dx, ctx.stream);
  Tensor dyh = fused::host_f32(ctx, dy.slice(0, hr));
  Tensor dxh_ref = Tensor::empty({hr, k}, DType::kF32);
  ops::cpu::grouped_gemm_backward_input(dyh, wh, head, dxh_ref, Stream::cpu());
  ctx.check(kFam, "dgrad first experts " + sz, fused::host_f32(ctx, dx.slice(0, hr)), dxh_ref, kTolBF16);
  rate(ctx.time_ms([&] { ops::cuda::grouped_gemm_backward_input(dy, w, counts, dx, ctx.stream); }));
  ops::cuda::grouped_gemm_backward_weight(dy, x, counts, dw, ctx.stream, false);
  Tensor dwh_ref = Tensor::empty({3, n, k}, DType::kF32);
  ops::cpu::grouped_gemm_backward_weight(dyh, xh, head, dwh_ref, Stream::cpu(), false);
  fused::check_true(ctx, kFam, "wgrad all experts finite " + sz, all_finite(ctx, dw));
  ctx.check(kFam, "wgrad first experts " + sz, fused::host_f32(ctx, dw.slice(0, 3)), dwh_ref, kTolF32 * 10);
  rate(ctx.time_ms([&] { ops::cuda::grouped_gemm_backward_weight(dy, x, counts, dw, ctx.stream, true); }));
}

}  // namespace

PRIMUS_GPU_TEST(grouped_gemm) {
  const GroupedGemmPath all[] = {GroupedGemmPath::kAuto, GroupedGemmPath::kCublasGrouped,
                                 GroupedGemmPath::kLtLoop, GroupedGemmPath::kLtStreams};
  for (GroupedGemmPath p : all) {
    check_case(ctx, p, {5, 0, 7}, 2, 33, 31);
    check_case(ctx, p, {0, 31, 33, 0}, 0, 31, 33);
    check_case(ctx, p, {127, 3, 0, 1}, 5, 17, 127);
    check_case(ctx, p, {0, 0, 0}, 4, 64, 64);
    check_case(ctx, p, uneven_counts(ctx, 16, 2000, 3), 7, 256, 192);
    check_case(ctx, p, {64, 64, 64, 64}, 0, 128, 256);
  }
  // Strided-batched needs equal counts; forcing it on unequal ones is an error.
  check_case(ctx, GroupedGemmPath::kStridedBatched, {64, 64, 64, 64}, 0, 128, 256);
  check_case(ctx, GroupedGemmPath::kStridedBatched, {33, 33, 33}, 3, 31, 127);
  {
    ops::cuda::set_grouped_gemm_path(GroupedGemmPath::kStridedBatched);
    Tensor x = gpu_randn(ctx, {10, 8}, DType::kBF16), w = gpu_randn(ctx, {2, 8, 8}, DType::kBF16);
    Tensor y = ctx.poisoned({10, 8}, DType::kBF16);
    const std::vector<int64_t> counts = {3, 7};
    bool threw = false;
    try {
      ops::cuda::grouped_gemm_forward(x, w, counts, y, ctx.stream);
    } catch (const Error&) {
      threw = true;
    }
    fused::check_true(ctx, kFam, "batched rejects unequal counts", threw);
  }
  for (GroupedGemmPath p : all) timed_case(ctx, p, 128, 128 * 256, 1536, 2048);  // Qwen3-30B-A3B gate+up
  ops::cuda::set_grouped_gemm_path(GroupedGemmPath::kAuto);
}

}  // namespace primus::gputest
