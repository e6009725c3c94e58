// Soft-capping (ops/softcap.h) on the GPU against the CPU reference: forward and backward, bf16 (the output
// logits) and f32 (the router's), odd sizes, an unaligned (scalar-path) case, in place and out of place.
#include <fmt/format.h>

#include "gpu/fused_test_util.h"
#include "ops/cpu/softcap_cpu.h"
#include "ops/cuda/softcap_cuda.h"

namespace primus::gputest {
namespace {

using fused::gpu_poisoned_view;
using fused::gpu_view;

void softcap_case(Context& ctx, DType dt, int64_t n, int64_t offset, float cap) {
  const std::string sz = fmt::format("{} n={}{} cap={}", dtype_name(dt), n, offset ? " unaligned" : "", cap);
  const double tol = dt == DType::kBF16 ? kTolBF16 : 1e-6;
  // The inputs rounded to dt first, so that both sides start from the same values.
  Tensor x_c = ctx.randn_cpu({n}, DType::kF32, 2.0 * cap), g_c = ctx.randn_cpu({n}, DType::kF32);
  if (dt == DType::kBF16) {
    x_c = cpu_cast(cpu_cast(x_c, DType::kBF16), DType::kF32);
    g_c = cpu_cast(cpu_cast(g_c, DType::kBF16), DType::kF32);
  }
  Tensor x = gpu_view(ctx, dt == DType::kF32 ? x_c : cpu_cast(x_c, dt), offset);
  Tensor y = gpu_poisoned_view(ctx, n, dt, offset);
  ops::cuda::softcap_forward(x, cap, y, ctx.stream);
  Tensor y_ref = Tensor::empty({n}, DType::kF32);
  ops::cpu::softcap_forward(x_c, cap, y_ref, Stream::cpu());
  ctx.check("softcap", "forward " + sz, y, y_ref, tol);
  // The backward from the GPU's stored y (the CPU from the same values, widened).
  Tensor y_c = fused::host_f32(ctx, y);
  Tensor g = gpu_view(ctx, dt == DType::kF32 ? g_c : cpu_cast(g_c, dt), offset);
  Tensor dx = gpu_poisoned_view(ctx, n, dt, offset);
  ops::cuda::softcap_backward(y, g, cap, dx, ctx.stream);
  Tensor dx_ref = Tensor::empty({n}, DType::kF32);
  ops::cpu::softcap_backward(y_c, g_c, cap, dx_ref, Stream::cpu());
  ctx.check("softcap", "backward " + sz, dx, dx_ref, tol);
  // In place: bitwise the out-of-place results.
  ops::cuda::softcap_forward(x, cap, x, ctx.stream);
  ops::cuda::softcap_backward(y, g, cap, g, ctx.stream);
  stream_sync(ctx.stream);
  const bool same = fused::bitwise_equal(x, y) && fused::bitwise_equal(g, dx);
  fused::check_true(ctx, "softcap", "in place = out of place " + sz, same, same ? "bitwise" : "MISMATCH");
}

}  // namespace

PRIMUS_GPU_TEST(softcap) {
  for (DType dt : {DType::kBF16, DType::kF32}) {
    softcap_case(ctx, dt, 31, 0, 30.0f);
    softcap_case(ctx, dt, 127, 1, 0.5f);
    softcap_case(ctx, dt, 33, 1, 50.0f);
    softcap_case(ctx, dt, (int64_t{1} << 20) + 3, 0, 50.0f);
  }
}

}  // namespace primus::gputest
