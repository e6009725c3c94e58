// AdamW with bf16 moments (the precision-aware optimizer: exp_avg_dtype / exp_avg_sq_dtype bf16) on the GPU:
//  - adamw_step for each pair of moment dtypes with a bf16 moment, odd sizes and an unaligned (scalar-path)
//    span, several steps, against the CPU reference (f64 arithmetic, moments stored rounded to nearest even):
//    the master to f32 tolerance, the stored moments bit for bit but for rare one-ulp rounding ties (the
//    CPU rounds an f64 value, the GPU an f32 one);
//  - the kernels that must agree with adamw_step bit for bit: adamw_step_split (masters in remainders), the
//    row-sparse embedding's adamw_step_sparse / _split_sparse, and the updated embedding lookup;
//  - the update's bandwidth at 100 M parameters (22 bytes per parameter instead of 30).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <utility>

#include "gpu/fused_test_util.h"
#include "ops/cpu/embedding_cpu.h"
#include "ops/cpu/optimizer_cpu.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/optimizer_cuda.h"
#include "ops/cuda/row_sparse_grad_cuda.h"
#include "ops/elementwise.h"

namespace primus::gputest {
namespace {

using fused::bitwise_equal;
using fused::check_true;
using fused::gpu_poisoned_view;
using fused::gpu_view;

constexpr const char* kFamily = "optimizer_bf16_moments";

// |x| of a standard normal times `scale`, CPU f32: a second moment.
Tensor abs_randn(Context& ctx, int64_t n, double scale) {
  Tensor t = ctx.randn_cpu({n}, DType::kF32, scale);
  for (float& x : std::span(t.data<float>(), static_cast<size_t>(n))) x = std::fabs(x);
  return t;
}

// A moment in `dt` on the CPU, from f32 values (bf16: rounded to nearest even).
Tensor as_moment(const Tensor& f32, DType dt) {
  return dt == DType::kF32 ? f32 : cpu_cast(f32, dt);
}

// The GPU moments against the CPU's: f32 ones to f32 tolerance; bf16 ones bit for bit except at most 1 in
// 1000 elements a single ulp apart (an f32 and an f64 value on either side of a rounding tie).
void check_moment(Context& ctx, const std::string& name, const Tensor& gpu, const Tensor& ref) {
  if (ref.dtype() == DType::kF32) {
    ctx.check(kFamily, name, gpu, ref, 1e-6);
    return;
  }
  stream_sync(ctx.stream);
  const Tensor got = gpu.to(Stream::cpu());
  const int64_t n = ref.numel();
  const auto* a = static_cast<const uint16_t*>(got.data_ptr());
  const auto* b = static_cast<const uint16_t*>(ref.data_ptr());
  int64_t differ = 0, worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    ++differ;
    worst = std::max<int64_t>(worst, std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i])));
  }
  const bool ok = worst <= 1 && differ * 1000 <= std::max<int64_t>(n, 1000);
  check_true(
      ctx, kFamily, name, ok,
      fmt::format("{} of {} bf16 elements differ from the CPU's, by at most {} ulp", differ, n, worst));
}

void dense_case(Context& ctx, int64_t n, int64_t offset, DType mdt, DType vdt, int steps) {
  const std::string sz =
      fmt::format("n={}{} m {} v {}", n, offset ? " unaligned" : "", dtype_name(mdt), dtype_name(vdt));
  Tensor w_ref = ctx.randn_cpu({n}, DType::kF32);
  Tensor m_ref = as_moment(ctx.randn_cpu({n}, DType::kF32, 0.01), mdt);
  Tensor v_ref = as_moment(abs_randn(ctx, n, 1e-4), vdt);
  Tensor w = gpu_view(ctx, w_ref, offset), m = gpu_view(ctx, m_ref, offset), v = gpu_view(ctx, v_ref, offset);
  Tensor copy = gpu_poisoned_view(ctx, n, DType::kBF16, offset), copy_ref = Tensor::empty({n}, DType::kBF16);
  for (int step = 1; step <= steps; ++step) {
    const ops::AdamWParams p = fused::adamw_test_params(step);
    Tensor g_ref = ctx.randn_cpu({n}, DType::kF32, 0.1);
    Tensor g = gpu_view(ctx, g_ref, offset);
    ops::cuda::adamw_step(w, g, m, v, p, &copy, ctx.stream);
    ops::cpu::adamw_step(w_ref, g_ref, m_ref, v_ref, p, &copy_ref, Stream::cpu());
  }
  stream_sync(ctx.stream);
  const std::string name = fmt::format("adamw {} steps {}", steps, sz);
  ctx.check(kFamily, name + " master", w, w_ref, 1e-6);
  ctx.check(kFamily, name + " bf16 copy", copy, copy_ref, kTolBF16);
  check_moment(ctx, name + " m", m, m_ref);
  check_moment(ctx, name + " v", v, v_ref);
}

// adamw_step_split on (hi, rem) = adamw_step on the joined master, split: bitwise, moments included.
void split_case(Context& ctx, int64_t n, int64_t offset) {
  const std::string sz = fmt::format("n={}{}", n, offset ? " unaligned" : "");
  const Tensor w_c = ctx.randn_cpu({n}, DType::kF32), g_c = ctx.randn_cpu({n}, DType::kF32, 0.1);
  const Tensor m_c = cpu_cast(ctx.randn_cpu({n}, DType::kF32, 0.01), DType::kBF16);
  const Tensor v_c = cpu_cast(abs_randn(ctx, n, 1e-4), DType::kBF16);
  const ops::AdamWParams p = fused::adamw_test_params(4);
  Tensor w = gpu_view(ctx, w_c, offset), g = gpu_view(ctx, g_c, offset);
  Tensor m1 = gpu_view(ctx, m_c, offset), v1 = gpu_view(ctx, v_c, offset);
  Tensor m2 = gpu_view(ctx, m_c, offset), v2 = gpu_view(ctx, v_c, offset);
  Tensor hi = gpu_poisoned_view(ctx, n, DType::kBF16, offset),
         rem = gpu_poisoned_view(ctx, n, DType::kI16, offset);
  ops::cuda::master_split(w, hi, &rem, ctx.stream);
  ops::cuda::adamw_step_split(hi, rem, g, m1, v1, p, ctx.stream);
  ops::cuda::adamw_step(w, g, m2, v2, p, nullptr, ctx.stream);
  Tensor hi2 = gpu_poisoned_view(ctx, n, DType::kBF16, offset),
         rem2 = gpu_poisoned_view(ctx, n, DType::kI16, offset);
  ops::cuda::master_split(w, hi2, &rem2, ctx.stream);
  stream_sync(ctx.stream);
  const bool ok_w = bitwise_equal(hi, hi2) && bitwise_equal(rem, rem2);
  const bool ok_mv = bitwise_equal(m1, m2) && bitwise_equal(v1, v2);
  check_true(ctx, kFamily, "adamw_step_split bf16 moments " + sz, ok_w && ok_mv,
             ok_w && ok_mv ? "bitwise = adamw_step on the joined master"
                           : fmt::format("MISMATCH: hi/rem {}, m/v {}", ok_w, ok_mv));
}

// n uniform token ids in [0, v).
Tensor uniform_tokens(Context& ctx, int64_t n, int64_t v) {
  Tensor t = Tensor::empty({n}, DType::kI32);
  std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(v - 1));
  for (int32_t& x : std::span(t.data<int32_t>(), static_cast<size_t>(n))) x = u(ctx.rng);
  return t;
}

// The row-sparse embedding: adamw_step_sparse / _split_sparse and the updated lookups with bf16 moments,
// bitwise against adamw_step with the densified gradient (and the lookup of the copy it writes).
void sparse_case(Context& ctx, int64_t n_tokens, int64_t v, int64_t d) {
  const std::string sz = fmt::format("V={} D={} tokens={}", v, d, n_tokens);
  const int64_t len = v * d;
  ops::RowSparseGrad g = ops::cuda::row_sparse_grad(v, d, std::min(v, n_tokens), ctx.stream);
  Tensor tokens = uniform_tokens(ctx, n_tokens, v).to(ctx.stream);
  Tensor dout = fused::gpu_randn(ctx, {n_tokens, d}, DType::kBF16);
  ops::cuda::embedding_backward_sparse(tokens, dout, g, ctx.stream);
  Tensor dense = ctx.poisoned({v, d}, DType::kF32);
  ops::cuda::row_sparse_to_dense(g, dense, ctx.stream);
  const Tensor w_c = ctx.randn_cpu({len}, DType::kF32);
  const Tensor m_c = cpu_cast(ctx.randn_cpu({len}, DType::kF32, 0.01), DType::kBF16);
  const Tensor v_c = cpu_cast(abs_randn(ctx, len, 1e-4), DType::kBF16);
  const ops::AdamWParams p = fused::adamw_test_params(3, 0.7f);

  // The updated lookups first (they read the state before the steps below write it).
  Tensor w = gpu_view(ctx, w_c, 0), m = gpu_view(ctx, m_c, 0), vv = gpu_view(ctx, v_c, 0);
  Tensor lookup_tokens = uniform_tokens(ctx, 2 * n_tokens + 1, v).to(ctx.stream);
  const int64_t nl = lookup_tokens.numel();
  Tensor up = ctx.poisoned({nl, d}, DType::kBF16), up_sparse = ctx.poisoned({nl, d}, DType::kBF16);
  ops::cuda::embedding_forward_updated(lookup_tokens, w.view({v, d}), dense, m.view({v, d}), vv.view({v, d}),
                                       p, up, ctx.stream);
  ops::cuda::embedding_forward_updated_sparse(lookup_tokens, w.view({v, d}), g, m.view({v, d}),
                                              vv.view({v, d}), p, up_sparse, ctx.stream);

  Tensor w1 = gpu_view(ctx, w_c, 0), m1 = gpu_view(ctx, m_c, 0), v1 = gpu_view(ctx, v_c, 0);
  Tensor w2 = gpu_view(ctx, w_c, 0), m2 = gpu_view(ctx, m_c, 0), v2 = gpu_view(ctx, v_c, 0);
  Tensor c1 = ctx.poisoned({len}, DType::kBF16), c2 = ctx.poisoned({len}, DType::kBF16);
  ops::cuda::adamw_step(w1, dense.view({len}), m1, v1, p, &c1, ctx.stream);
  ops::cuda::adamw_step_sparse(w2, g, 0, m2, v2, p, &c2, ctx.stream);
  Tensor looked_up = ctx.poisoned({nl, d}, DType::kBF16);
  ops::cuda::embedding_forward(lookup_tokens, c1.view({v, d}), looked_up, ctx.stream);
  stream_sync(ctx.stream);
  const bool ok =
      bitwise_equal(w1, w2) && bitwise_equal(m1, m2) && bitwise_equal(v1, v2) && bitwise_equal(c1, c2);
  check_true(ctx, kFamily, "adamw_step_sparse bf16 moments " + sz, ok,
             ok ? "bitwise = adamw_step with the densified gradient" : "MISMATCH");
  const bool ok_up = bitwise_equal(up, looked_up) && bitwise_equal(up_sparse, looked_up);
  check_true(ctx, kFamily, "embedding_forward_updated(_sparse) bf16 moments " + sz, ok_up,
             ok_up ? "bitwise = adamw_step + lookup of its copy" : "MISMATCH");

  Tensor h1 = ctx.poisoned({len}, DType::kBF16), r1 = ctx.poisoned({len}, DType::kI16);
  ops::cuda::master_split(w, h1, &r1, ctx.stream);
  Tensor h2 = ctx.poisoned({len}, DType::kBF16), r2 = ctx.poisoned({len}, DType::kI16);
  h2.copy_from(h1, ctx.stream);
  r2.copy_from(r1, ctx.stream);
  Tensor m3 = gpu_view(ctx, m_c, 0), v3 = gpu_view(ctx, v_c, 0), m4 = gpu_view(ctx, m_c, 0),
         v4 = gpu_view(ctx, v_c, 0);
  ops::cuda::adamw_step_split(h1, r1, dense.view({len}), m3, v3, p, ctx.stream);
  ops::cuda::adamw_step_split_sparse(h2, r2, g, 0, m4, v4, p, ctx.stream);
  stream_sync(ctx.stream);
  const bool ok_s =
      bitwise_equal(h1, h2) && bitwise_equal(r1, r2) && bitwise_equal(m3, m4) && bitwise_equal(v3, v4);
  check_true(ctx, kFamily, "adamw_step_split_sparse bf16 moments " + sz, ok_s,
             ok_s ? "bitwise = adamw_step_split with the densified gradient" : "MISMATCH");
}

// One step over n parameters with bf16 moments and the bf16 copy: 16 bytes read, 10 written per parameter.
void model_size(Context& ctx, int64_t n) {
  Tensor w = fused::gpu_randn(ctx, {n}, DType::kF32), g = fused::gpu_randn(ctx, {n}, DType::kF32, 0.1);
  Tensor m = fused::gpu_randn(ctx, {n}, DType::kBF16, 0.01), v = ctx.poisoned({n}, DType::kBF16);
  ops::fill_(v, 1e-8f, ctx.stream);
  Tensor copy = ctx.poisoned({n}, DType::kBF16);
  ops::AdamWParams p = fused::adamw_test_params(10);
  const double ms = ctx.time_ms([&] { ops::cuda::adamw_step(w, g, m, v, p, &copy, ctx.stream); }, 2, 5);
  const int64_t bad = ops::count_nonfinite(w, ctx.stream);
  check_true(ctx, kFamily, "adamw bf16 moments n=" + fused::size_str(n) + " finite", bad == 0,
             fmt::format("{} non-finite master weights", bad));
  fused::set_rate(ctx, ms, n * 22.0);
}

}  // namespace

PRIMUS_GPU_TEST(optimizer_bf16_moments) {
  for (auto [mdt, vdt] :
       {std::pair{DType::kBF16, DType::kBF16}, {DType::kBF16, DType::kF32}, {DType::kF32, DType::kBF16}}) {
    dense_case(ctx, 31, 0, mdt, vdt, 3);
    dense_case(ctx, 127, 1, mdt, vdt, 5);
  }
  dense_case(ctx, 33, 1, DType::kBF16, DType::kBF16, 4);
  dense_case(ctx, (int64_t{1} << 20) + 3, 0, DType::kBF16, DType::kBF16, 5);
  split_case(ctx, 127, 0);
  split_case(ctx, 1000, 1);
  split_case(ctx, (int64_t{1} << 20) + 1, 0);
  sparse_case(ctx, 127, 1000, 33);
  sparse_case(ctx, 1000, 4096, 64);
  model_size(ctx, int64_t{100} * 1000 * 1000);
}

}  // namespace primus::gputest
