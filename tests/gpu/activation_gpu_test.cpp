// SwiGLU on the GPU against the CPU reference.
#include <fmt/format.h>

#include "gpu/fused_test_util.h"
#include "ops/cpu/activation_cpu.h"
#include "ops/cuda/activation_cuda.h"

namespace primus::gputest {
namespace {

using fused::gpu_randn;

void swiglu_case(Context& ctx, int64_t rows, int64_t f, bool timed) {
  const std::string sz = fmt::format("R={} F={}", rows, f);
  Tensor gu = gpu_randn(ctx, {rows, 2 * f}, DType::kBF16, 2.0);
  Tensor guf = fused::host_f32(ctx, gu);

  Tensor out = ctx.poisoned({rows, f}, DType::kBF16);
  ops::cuda::swiglu_forward(gu, out, ctx.stream);
  Tensor out_ref = Tensor::empty({rows, f}, DType::kF32);
  ops::cpu::swiglu_forward(guf, out_ref, Stream::cpu());
  ctx.check("activation", "swiglu_fwd " + sz, out, out_ref, kTolBF16);
  if (timed) {
    const double ms = ctx.time_ms([&] { ops::cuda::swiglu_forward(gu, out, ctx.stream); });
    fused::set_rate(ctx, ms, rows * f * 2.0 * 3);
  }

  Tensor dout = gpu_randn(ctx, {rows, f}, DType::kBF16);
  Tensor doutf = fused::host_f32(ctx, dout);
  Tensor dgu = ctx.poisoned({rows, 2 * f}, DType::kBF16);
  ops::cuda::swiglu_backward(dout, gu, dgu, ctx.stream);
  Tensor dgu_ref = Tensor::empty({rows, 2 * f}, DType::kF32);
  ops::cpu::swiglu_backward(doutf, guf, dgu_ref, Stream::cpu());
  ctx.check("activation", "swiglu_bwd " + sz, dgu, dgu_ref, kTolBF16);
  if (timed) {
    const double ms = ctx.time_ms([&] { ops::cuda::swiglu_backward(dout, gu, dgu, ctx.stream); });
    fused::set_rate(ctx, ms, rows * f * 2.0 * 5);
  }

  // In place: dgu is gu (the trainer may reuse the gate/up buffer for its gradient).
  if (!timed) {
    ops::cuda::swiglu_backward(dout, gu, gu, ctx.stream);
    ctx.check("activation", "swiglu_bwd in place " + sz, gu, dgu_ref, kTolBF16);
  }
}

}  // namespace

PRIMUS_GPU_TEST(activation) {
  for (auto [r, f] : {std::pair<int64_t, int64_t>{31, 33}, {33, 31}, {127, 1000}, {1000, 127}, {8, 8}}) {
    swiglu_case(ctx, r, f, false);
  }
  swiglu_case(ctx, 16384, 8192, true);                   // a 4096-wide model's FFN
  if (!ctx.quick) swiglu_case(ctx, 16384, 14336, true);  // Llama-3-8B
}

}  // namespace primus::gputest
