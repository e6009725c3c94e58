// The sigmoid-gated row sum (Qwen2-MoE's shared-expert gate) on the GPU against the CPU reference: forward
// (y += sigmoid(g) x, bf16 rows, f32 logits) and backward (dx poisoned, dg poisoned), odd sizes and a
// model-size case with its bandwidth.
#include <fmt/format.h>

#include "gpu/fused_test_util.h"
#include "ops/cpu/sigmoid_gate_cpu.h"
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

}  // namespace

PRIMUS_GPU_TEST(sigmoid_gate) {
  for (auto [n, d] : {std::pair<int64_t, int64_t>{1, 1}, {31, 33}, {127, 1000}, {1000, 127}, {5, 4097}}) {
    gate_case(ctx, n, d, false);
  }
  gate_case(ctx, 16384, 2048, true);  // Qwen1.5-MoE-A2.7B's width, 16k tokens
}

}  // namespace primus::gputest
