// FP8 MoE experts (model/fp8_experts.h) on the GPU against the same composite on the CPU (the exact FP8
// emulation of ops/fp8.h beneath it), from the same bf16 values: forward and input gradient for every recipe
// on uneven routed counts (an expert without tokens, counts of 1, 31, 33, 127) with poisoned padding rows
// past them; then, timed, the Qwen3-30B-A3B and Mixtral-8x7B expert shapes next to the BF16 grouped GEMM
// of the same call.
#include <fmt/format.h>

#include <numeric>
#include <vector>

#include "fp8_test_util.h"
#include "gpu/fused_test_util.h"
#include "model/fp8_experts.h"
#include "model/fp8_linear.h"
#include "ops/grouped_gemm.h"

namespace primus::gputest {
namespace {

constexpr const char* kFam = "fp8_experts";
using fp8test::recipe;

StepContext step_ctx(const Stream& s, Fp8State* st, DType act) {
  StepContext ctx;
  ctx.stream = s;
  ctx.act_dtype = act;
  ctx.fp8 = st;
  return ctx;
}

void recipe_case(Context& ctx, const char* name, const char* format, const std::vector<int64_t>& counts,
                 int64_t pad, int64_t N, int64_t K) {
  const int64_t E = static_cast<int64_t>(counts.size());
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t{0}) + pad;
  const std::string sz = fmt::format("{} E={} rows={} N={} K={}", name, E, rows, N, K);
  try {
    Tensor x = fused::gpu_randn(ctx, {rows, K}, DType::kBF16),
           w = fused::gpu_randn(ctx, {E, N, K}, DType::kBF16, 0.02);
    Tensor dy = fused::gpu_randn(ctx, {rows, N}, DType::kBF16, 1e-3);
    Tensor xf = fused::host_f32(ctx, x), wf = fused::host_f32(ctx, w), dyf = fused::host_f32(ctx, dy);
    Fp8State gst(recipe(name, format), ctx.stream), cst(recipe(name, format), Stream::cpu());
    const int gslot = gst.add("experts"), cslot = cst.add("experts");
    const StepContext g = step_ctx(ctx.stream, &gst, DType::kBF16),
                      c = step_ctx(Stream::cpu(), &cst, DType::kF32);
    Tensor y = ctx.poisoned({rows, N}, DType::kBF16), dx = ctx.poisoned({rows, K}, DType::kBF16);
    Tensor y_ref = Tensor::empty({rows, N}, DType::kF32), dx_ref = Tensor::empty({rows, K}, DType::kF32);
    expert_project(g, gslot, x, w, counts, y);
    expert_project(c, cslot, xf, wf, counts, y_ref);
    ctx.check(kFam, "fwd " + sz, y, y_ref, kTolBF16);
    expert_project_backward_input(g, gslot, dy, w, counts, dx);
    expert_project_backward_input(c, cslot, dyf, wf, counts, dx_ref);
    ctx.check(kFam, "dgrad " + sz, dx, dx_ref, kTolBF16);
  } catch (const std::exception& e) {
    ctx.record(kFam, sz + ": " + e.what(), INFINITY, 0);
  }
}

// An MoE layer's four expert GEMMs' forward and dgrad halves, FP8 (delayed scaling after one step, so the
// casts use fixed scales as in training) against the BF16 grouped GEMM, on `rows` tokens per expert.
void timed_case(Context& ctx, const char* model, int64_t E, int64_t m, int64_t N, int64_t K) {
  const std::vector<int64_t> counts(static_cast<size_t>(E), m);
  const int64_t rows = E * m;
  Tensor x = fused::gpu_randn(ctx, {rows, K}, DType::kBF16),
         w = fused::gpu_randn(ctx, {E, N, K}, DType::kBF16, 0.02);
  Tensor dy = fused::gpu_randn(ctx, {rows, N}, DType::kBF16, 1e-3);
  Tensor y = ctx.poisoned({rows, N}, DType::kBF16), dx = ctx.poisoned({rows, K}, DType::kBF16);
  Fp8State st(recipe("delayed", "hybrid"), ctx.stream);
  const int slot = st.add("experts");
  const StepContext g = step_ctx(ctx.stream, &st, DType::kBF16);
  expert_project(g, slot, x, w, counts, y);
  expert_project_backward_input(g, slot, dy, w, counts, dx);
  st.end_step({});
  const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(N) * static_cast<double>(K);
  const std::string sz = fmt::format("{} {}x{} {}->{}", model, E, m, K, N);
  double ms = ctx.time_ms([&] { expert_project(g, slot, x, w, counts, y); });
  ctx.timing(kFam, "fp8 fwd " + sz, ms, flops / (ms * 1e9), "TFLOP/s");
  ms = ctx.time_ms([&] { ops::grouped_gemm_forward(x, w, counts, y, ctx.stream); });
  ctx.timing(kFam, "bf16 fwd " + sz, ms, flops / (ms * 1e9), "TFLOP/s");
  ms = ctx.time_ms([&] { expert_project_backward_input(g, slot, dy, w, counts, dx); });
  ctx.timing(kFam, "fp8 dgrad " + sz, ms, flops / (ms * 1e9), "TFLOP/s");
  ms = ctx.time_ms([&] { ops::grouped_gemm_backward_input(dy, w, counts, dx, ctx.stream); });
  ctx.timing(kFam, "bf16 dgrad " + sz, ms, flops / (ms * 1e9), "TFLOP/s");
}

}  // namespace

PRIMUS_GPU_TEST(fp8_experts) {
  // Small shapes: FP8 at any row count (fp8_experts.h's launch-bound rule would keep them BF16).
  set_fp8_expert_min_rows(0);
  const std::vector<int64_t> uneven = {31, 0, 128, 33, 1, 127};
  recipe_case(ctx, "delayed", "hybrid", uneven, 5, 256, 384);
  recipe_case(ctx, "tensorwise", "hybrid", uneven, 0, 256, 384);
  recipe_case(ctx, "rowwise", "e4m3", uneven, 3, 208, 272);
  recipe_case(ctx, "blockwise", "e4m3", uneven, 7, 256, 384);
  recipe_case(ctx, "delayed", "hybrid", {0, 0, 0}, 4, 128, 128);  // nothing routed: all padding
  if (!ctx.quick) {
    timed_case(ctx, "qwen3-30b-a3b gate_up", 128, 256, 1536, 2048);
    timed_case(ctx, "mixtral-8x7b gate_up", 8, 4096, 28672, 4096);
  }
  set_fp8_expert_min_rows(kFp8ExpertMinMeanRows);
}

}  // namespace primus::gputest
