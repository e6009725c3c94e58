// RMSNorm and per-head RMSNorm (qk-norm) on the GPU against the CPU reference.
#include <fmt/format.h>

#include "gpu/fused_test_util.h"
#include "ops/cpu/norm_cpu.h"
#include "ops/cuda/norm_cuda.h"

namespace primus::gputest {
namespace {

using fused::cpu_copy_f32;
using fused::gpu_randn;
using fused::set_rate;

constexpr float kEps = 1e-5f;

void rmsnorm_case(Context& ctx, int64_t rows, int64_t d, bool timed) {
  const std::string sz = fmt::format("R={} D={}", rows, d);
  Tensor x = gpu_randn(ctx, {rows, d}, DType::kBF16);
  Tensor w = gpu_randn(ctx, {d}, DType::kBF16, 0.5);
  Tensor xf = fused::host_f32(ctx, x), wf = fused::host_f32(ctx, w);

  // Forward.
  Tensor y = ctx.poisoned({rows, d}, DType::kBF16), rstd = ctx.poisoned({rows}, DType::kF32);
  ops::cuda::rmsnorm_forward(x, w, kEps, y, rstd, ctx.stream);
  Tensor y_ref = Tensor::empty({rows, d}, DType::kF32), rstd_ref = Tensor::empty({rows}, DType::kF32);
  ops::cpu::rmsnorm_forward(xf, wf, kEps, y_ref, rstd_ref, Stream::cpu());
  ctx.check("norm", "rmsnorm_fwd y " + sz, y, y_ref, kTolBF16);
  ctx.check("norm", "rmsnorm_fwd rstd " + sz, rstd, rstd_ref, kTolF32);
  if (timed) {
    const double ms = ctx.time_ms([&] { ops::cuda::rmsnorm_forward(x, w, kEps, y, rstd, ctx.stream); });
    set_rate(ctx, ms, rows * d * 2.0 * 2 + rows * 4.0);
  }

  // Backward, both dx modes. The GPU gets the reference rstd so that only the backward is compared.
  Tensor dy = gpu_randn(ctx, {rows, d}, DType::kBF16);
  Tensor dyf = fused::host_f32(ctx, dy);
  Tensor rstd_g = rstd_ref.to(ctx.stream);
  for (bool acc : {false, true}) {
    const std::string name = fmt::format("rmsnorm_bwd{} ", acc ? " acc" : "") + sz;
    Tensor dx = acc ? gpu_randn(ctx, {rows, d}, DType::kBF16) : ctx.poisoned({rows, d}, DType::kBF16);
    Tensor dw = gpu_randn(ctx, {d}, DType::kF32);
    Tensor dx_ref = acc ? cpu_copy_f32(ctx, dx) : Tensor::empty({rows, d}, DType::kF32);
    Tensor dw_ref = cpu_copy_f32(ctx, dw);
    ops::cuda::rmsnorm_backward(dy, x, w, rstd_g, dx, dw, acc, ctx.stream);
    ops::cpu::rmsnorm_backward(dyf, xf, wf, rstd_ref, dx_ref, dw_ref, acc, Stream::cpu());
    ctx.check("norm", name + " dx", dx, dx_ref, kTolBF16);
    ctx.check("norm", name + " dw", dw, dw_ref, kTolF32);
    if (timed) {
      const double ms =
          ctx.time_ms([&] { ops::cuda::rmsnorm_backward(dy, x, w, rstd_g, dx, dw, acc, ctx.stream); });
      set_rate(ctx, ms, rows * d * 2.0 * (acc ? 4 : 3) + rows * 4.0 + d * 8.0);
    }
  }
}

// x [R, total * hd]; heads [hb, hb + nh) are normalised.
void head_case(Context& ctx, int64_t rows, int64_t total, int64_t hb, int64_t nh, int64_t hd, bool timed) {
  const std::string sz = fmt::format("R={} heads {}+{}/{} hd={}", rows, hb, nh, total, hd);
  const int64_t cols = total * hd, c0 = hb * hd, c1 = (hb + nh) * hd;
  Tensor x = gpu_randn(ctx, {rows, cols}, DType::kBF16);
  Tensor w = gpu_randn(ctx, {hd}, DType::kBF16, 0.5);
  Tensor xf = fused::host_f32(ctx, x), wf = fused::host_f32(ctx, w);

  Tensor y = ctx.poisoned({rows, cols}, DType::kBF16), rstd = ctx.poisoned({rows, nh}, DType::kF32);
  ops::cuda::head_rmsnorm_forward(x, hb, nh, hd, w, kEps, y, rstd, ctx.stream);
  Tensor y_ref = Tensor::zeros({rows, cols}, DType::kF32), rstd_ref = Tensor::empty({rows, nh}, DType::kF32);
  ops::cpu::head_rmsnorm_forward(xf, hb, nh, hd, wf, kEps, y_ref, rstd_ref, Stream::cpu());
  ctx.check("norm", "head_rmsnorm_fwd y " + sz, fused::columns_f32(ctx, y, c0, c1),
            fused::columns_f32(ctx, y_ref, c0, c1), kTolBF16);
  ctx.check("norm", "head_rmsnorm_fwd rstd " + sz, rstd, rstd_ref, kTolF32);
  fused::check_true(ctx, "norm", "head_rmsnorm_fwd other columns kept " + sz,
                    fused::untouched_outside(ctx, y, c0, c1));
  if (timed) {
    const double ms =
        ctx.time_ms([&] { ops::cuda::head_rmsnorm_forward(x, hb, nh, hd, w, kEps, y, rstd, ctx.stream); });
    set_rate(ctx, ms, rows * nh * hd * 2.0 * 2 + rows * nh * 4.0);
  }

  Tensor dy = gpu_randn(ctx, {rows, cols}, DType::kBF16);
  Tensor dyf = fused::host_f32(ctx, dy);
  Tensor rstd_g = rstd_ref.to(ctx.stream);
  Tensor dx = ctx.poisoned({rows, cols}, DType::kBF16);
  Tensor dw = gpu_randn(ctx, {hd}, DType::kF32);
  Tensor dx_ref = Tensor::zeros({rows, cols}, DType::kF32), dw_ref = cpu_copy_f32(ctx, dw);
  ops::cuda::head_rmsnorm_backward(dy, x, w, rstd_g, hb, nh, hd, dx, dw, ctx.stream);
  ops::cpu::head_rmsnorm_backward(dyf, xf, wf, rstd_ref, hb, nh, hd, dx_ref, dw_ref, Stream::cpu());
  ctx.check("norm", "head_rmsnorm_bwd dx " + sz, fused::columns_f32(ctx, dx, c0, c1),
            fused::columns_f32(ctx, dx_ref, c0, c1), kTolBF16);
  ctx.check("norm", "head_rmsnorm_bwd dw " + sz, dw, dw_ref, kTolF32);
  fused::check_true(ctx, "norm", "head_rmsnorm_bwd other columns kept " + sz,
                    fused::untouched_outside(ctx, dx, c0, c1));
  if (timed) {
    const double ms = ctx.time_ms(
        [&] { ops::cuda::head_rmsnorm_backward(dy, x, w, rstd_g, hb, nh, hd, dx, dw, ctx.stream); });
    set_rate(ctx, ms, rows * nh * hd * 2.0 * 3 + rows * nh * 4.0);
  }
}

// Determinism of dw (its block partials are summed in a fixed order): the same call twice, bitwise.
void rmsnorm_determinism(Context& ctx, int64_t rows, int64_t d) {
  Tensor x = gpu_randn(ctx, {rows, d}, DType::kBF16), w = gpu_randn(ctx, {d}, DType::kBF16);
  Tensor dy = gpu_randn(ctx, {rows, d}, DType::kBF16);
  Tensor y = Tensor::empty({rows, d}, DType::kBF16, ctx.stream),
         rstd = Tensor::empty({rows}, DType::kF32, ctx.stream);
  ops::cuda::rmsnorm_forward(x, w, kEps, y, rstd, ctx.stream);
  Tensor dw_start = gpu_randn(ctx, {d}, DType::kF32);
  Tensor dws[2];
  for (Tensor& dw : dws) {
    dw = Tensor::empty({d}, DType::kF32, ctx.stream);
    dw.copy_from(dw_start, ctx.stream);
    Tensor dx = Tensor::empty({rows, d}, DType::kBF16, ctx.stream);
    ops::cuda::rmsnorm_backward(dy, x, w, rstd, dx, dw, false, ctx.stream);
  }
  stream_sync(ctx.stream);
  fused::check_true(ctx, "norm", fmt::format("rmsnorm_bwd dw bitwise repeatable R={} D={}", rows, d),
                    fused::bitwise_equal(dws[0], dws[1]));
}

}  // namespace

PRIMUS_GPU_TEST(norm) {
  // Odd sizes (scalar path), aligned small sizes, every group width, and the model sizes (timed).
  for (auto [r, d] : {std::pair<int64_t, int64_t>{31, 33},
                      {33, 31},
                      {127, 1000},
                      {1000, 127},
                      {64, 8},
                      {5, 4999},
                      {3, 20000},
                      {257, 2048},
                      {17, 16384}}) {
    rmsnorm_case(ctx, r, d, false);
  }
  rmsnorm_case(ctx, 16384, 2048, true);
  if (!ctx.quick) rmsnorm_case(ctx, 16384, 4096, true);
  rmsnorm_determinism(ctx, 4099, 4096);

  head_case(ctx, 31, 3, 0, 3, 33, false);
  head_case(ctx, 33, 6, 1, 3, 64, false);
  head_case(ctx, 127, 4, 2, 2, 256, false);
  // Qwen3-style qk-norm over a fused [q | k | v] row (32 + 8 + 8 heads of 128): q heads then k heads.
  head_case(ctx, 16384, 48, 0, 32, 128, true);
  head_case(ctx, 16384, 48, 32, 8, 128, true);
}

}  // namespace primus::gputest
