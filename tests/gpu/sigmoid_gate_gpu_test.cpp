// The sigmoid-gated row sum (Qwen2-MoE's shared-expert gate) on the GPU against the CPU reference: forward
// (y += sigmoid(g) x, bf16 rows, f32 logits) and backward (dx poisoned, dg poisoned), odd sizes and a
// model-size case with its bandwidth.
#include <fmt/format.h>

#include "gpu/fused_test_util.h"
#include "ops/cpu/gemm_cpu.h"
#include "ops/cpu/sigmoid_gate_cpu.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/sigmoid_gate_cuda.h"

namespace primus::gputest {
namespace {

using fused::gpu_randn;

void gate_case(Context& ctx, int64_t n, int64_t d, bool timed) {
  const std::string sz = fmt::format("n={} d={}", n, d);
  Tensor g = gpu_randn(ctx, {n}, DType::kF32, 3.0);
  Tensor x = gpu_randn(ctx, {n, d}, DType::kBF16);
  Tensor y = gpu_randn(ctx, {n, d}, DType::kBF16);
  Tensor gf = fused::host_f32(ctx, g), xf = fused::host_f32(ctx, x), yf = fused::host_f32(ctx, y);

  ops::cuda::sigmoid_gate_forward(g, x, y, ctx.stream);
  ops::cpu::sigmoid_gate_forward(gf, xf, yf, Stream::cpu());
  ctx.check("sigmoid_gate", "fwd " + sz, y, yf, kTolBF16);

  Tensor dy = gpu_randn(ctx, {n, d}, DType::kBF16);
  Tensor dyf = fused::host_f32(ctx, dy);
  Tensor dx = ctx.poisoned({n, d}, DType::kBF16), dg = ctx.poisoned({n}, DType::kF32);
  ops::cuda::sigmoid_gate_backward(g, x, dy, dx, dg, ctx.stream);
  Tensor dx_ref = Tensor::empty({n, d}, DType::kF32), dg_ref = Tensor::empty({n}, DType::kF32);
  ops::cpu::sigmoid_gate_backward(gf, xf, dyf, dx_ref, dg_ref, Stream::cpu());
  ctx.check("sigmoid_gate", "bwd dx " + sz, dx, dx_ref, kTolBF16);
  ctx.check("sigmoid_gate", "bwd dg " + sz, dg, dg_ref, kTolBF16);
  if (timed) {
    double ms = ctx.time_ms([&] { ops::cuda::sigmoid_gate_forward(g, x, y, ctx.stream); });
    ctx.timing("sigmoid_gate", "fwd " + sz, ms, n * d * 6.0 / (ms * 1e6), "GB/s");
    ms = ctx.time_ms([&] { ops::cuda::sigmoid_gate_backward(g, x, dy, dx, dg, ctx.stream); });
    ctx.timing("sigmoid_gate", "bwd " + sz, ms, n * d * 6.0 / (ms * 1e6), "GB/s");
  }
}

// The gate's GEMMs as model/moe_mlp.cpp runs them, with one dimension 1: logits g [n, 1] = h w^T (f32 out),
// dh [n, d] += dg [n, 1] w [1, d], dw [1, d] = dg^T h (f32).
void gate_gemm_case(Context& ctx, int64_t n, int64_t d) {
  const std::string sz = fmt::format("n={} d={}", n, d);
  Tensor h = gpu_randn(ctx, {n, d}, DType::kBF16), w = gpu_randn(ctx, {1, d}, DType::kBF16, 0.1);
  Tensor hf = fused::host_f32(ctx, h), wf = fused::host_f32(ctx, w);
  Tensor g = ctx.poisoned({n, 1}, DType::kF32), g_ref = Tensor::empty({n, 1}, DType::kF32);
  ops::cuda::gemm(h, false, w, true, g, 1.0f, 0.0f, ctx.stream, nullptr);
  ops::cpu::gemm(hf, false, wf, true, g_ref, 1.0f, 0.0f, Stream::cpu(), nullptr);
  ctx.check("sigmoid_gate", "gate logits GEMM N=1 " + sz, g, g_ref, kTolBF16);
  Tensor dg = gpu_randn(ctx, {n, 1}, DType::kBF16), dh = gpu_randn(ctx, {n, d}, DType::kBF16);
  Tensor dgf = fused::host_f32(ctx, dg), dh_ref = fused::host_f32(ctx, dh);
  ops::cuda::linear_backward_input(dg, w, dh, /*accumulate=*/true, ctx.stream);
  ops::cpu::linear_backward_input(dgf, wf, dh_ref, /*accumulate=*/true, Stream::cpu());
  ctx.check("sigmoid_gate", "gate dh GEMM K=1 " + sz, dh, dh_ref, kTolBF16);
  Tensor dw = ctx.poisoned({1, d}, DType::kF32), dw_ref = Tensor::empty({1, d}, DType::kF32);
  ops::cuda::linear_backward_weight(dg, h, dw, nullptr, ctx.stream, /*accumulate=*/false);
  ops::cpu::linear_backward_weight(dgf, hf, dw_ref, nullptr, Stream::cpu(), /*accumulate=*/false);
  ctx.check("sigmoid_gate", "gate dw GEMM M=1 " + sz, dw, dw_ref, kTolBF16);
}

}  // namespace

PRIMUS_GPU_TEST(sigmoid_gate) {
  for (auto [n, d] : {std::pair<int64_t, int64_t>{1, 8}, {31, 33}, {1000, 127}, {4096, 2048}}) {
    gate_gemm_case(ctx, n, d);
  }
  for (auto [n, d] : {std::pair<int64_t, int64_t>{1, 1}, {31, 33}, {127, 1000}, {1000, 127}, {5, 4097}}) {
    gate_case(ctx, n, d, false);
  }
  gate_case(ctx, 16384, 2048, true);  // Qwen1.5-MoE-A2.7B's width, 16k tokens
}

}  // namespace primus::gputest
