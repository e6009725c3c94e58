// AdamW (several steps, with the fused bf16 parameter copy) and the deterministic sum of squares on the GPU
// against the CPU reference (which computes in f64).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "gpu/fused_test_util.h"
#include "ops/cpu/optimizer_cpu.h"
#include "ops/cuda/optimizer_cuda.h"

namespace primus::gputest {
namespace {

using fused::cpu_copy_f32;
using fused::gpu_randn;

constexpr double kTolOpt = 1e-6;

// A GPU f32 vector of n elements starting `offset` elements into a fresh buffer (offset 1 breaks 16-byte
// alignment and exercises the scalar path), filled from `src` (CPU f32).
Tensor gpu_vec(Context& ctx, const Tensor& src, int64_t offset) {
  const int64_t n = src.numel();
  Tensor buf = Tensor::empty({n + offset}, DType::kF32, ctx.stream);
  Tensor t = buf.slice(offset, offset + n);
  t.copy_from(src, ctx.stream);
  return t;
}

Tensor abs_randn(Context& ctx, int64_t n, double scale) {
  Tensor t = ctx.randn_cpu({n}, DType::kF32, scale);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = std::fabs(p[i]);
  return t;
}

void adamw_case(Context& ctx, int64_t n, int64_t offset, bool with_copy, int steps) {
  const std::string sz =
      fmt::format("n={}{}{}", n, offset ? " unaligned" : "", with_copy ? " +bf16 copy" : "");
  ops::AdamWParams p = fused::adamw_test_params(1);
  Tensor w_ref = ctx.randn_cpu({n}, DType::kF32), m_ref = ctx.randn_cpu({n}, DType::kF32, 0.01);
  Tensor v_ref = abs_randn(ctx, n, 1e-4);
  Tensor w = gpu_vec(ctx, w_ref, offset), m = gpu_vec(ctx, m_ref, offset), v = gpu_vec(ctx, v_ref, offset);
  Tensor copy_ref = Tensor::empty({n}, DType::kBF16);
  Tensor copy_buf = ctx.poisoned({n + offset}, DType::kBF16);
  Tensor copy = copy_buf.slice(offset, offset + n);
  for (int step = 1; step <= steps; ++step) {
    p.step = step;
    Tensor g_ref = ctx.randn_cpu({n}, DType::kF32, 0.1);
    Tensor g = gpu_vec(ctx, g_ref, offset);
    ops::cuda::adamw_step(w, g, m, v, p, with_copy ? &copy : nullptr, ctx.stream);
    ops::cpu::adamw_step(w_ref, g_ref, m_ref, v_ref, p, with_copy ? &copy_ref : nullptr, Stream::cpu());
    stream_sync(ctx.stream);
  }
  const std::string name = fmt::format("adamw {} steps {}", steps, sz);
  ctx.check("optimizer", name + " master", w, w_ref, kTolOpt);
  ctx.check("optimizer", name + " m", m, m_ref, kTolOpt);
  ctx.check("optimizer", name + " v", v, v_ref, kTolOpt);
  if (with_copy) ctx.check("optimizer", name + " bf16 copy", copy, copy_ref, kTolBF16);
}

void sum_squares_case(Context& ctx, int64_t n, int64_t offset) {
  const std::string sz = fmt::format("n={}{}", n, offset ? " unaligned" : "");
  Tensor x_ref = ctx.randn_cpu({n}, DType::kF32);
  Tensor x = gpu_vec(ctx, x_ref, offset);
  for (bool acc : {false, true}) {
    Tensor out_ref = ctx.randn_cpu({1}, DType::kF32);
    Tensor out = acc ? out_ref.to(ctx.stream) : ctx.poisoned({1}, DType::kF32);
    ops::cuda::sum_squares(x, out, acc, ctx.stream);
    ops::cpu::sum_squares(x_ref, out_ref, acc, Stream::cpu());
    ctx.check("optimizer", fmt::format("sum_squares{} {}", acc ? " acc" : "", sz), out, out_ref, kTolOpt);
  }
  Tensor a = ctx.poisoned({1}, DType::kF32), b = ctx.poisoned({1}, DType::kF32);
  ops::cuda::sum_squares(x, a, false, ctx.stream);
  ops::cuda::sum_squares(x, b, false, ctx.stream);
  stream_sync(ctx.stream);
  fused::check_true(ctx, "optimizer", "sum_squares bitwise repeatable " + sz, fused::bitwise_equal(a, b));
}

// Every chunk's sum in one call: against the CPU reference, and bitwise against sum_squares of each chunk
// alone (what the gradient norm computed before it batched its chunks).
void sum_squares_chunks_case(Context& ctx, int64_t n, int64_t chunk, int64_t offset) {
  const std::string sz = fmt::format("n={} chunk={}{}", n, chunk, offset ? " unaligned" : "");
  Tensor x_ref = ctx.randn_cpu({n}, DType::kF32);
  Tensor x = gpu_vec(ctx, x_ref, offset);
  const int64_t chunks = (n + chunk - 1) / chunk;
  Tensor out = ctx.poisoned({chunks}, DType::kF32), out_ref = Tensor::empty({chunks}, DType::kF32);
  ops::cuda::sum_squares_chunks(x, chunk, out, ctx.stream);
  ops::cpu::sum_squares_chunks(x_ref, chunk, out_ref, Stream::cpu());
  ctx.check("optimizer", "sum_squares_chunks " + sz, out, out_ref, kTolOpt);
  if (chunk % 4 != 0) return;
  Tensor one = ctx.poisoned({chunks}, DType::kF32);
  for (int64_t c = 0; c < chunks; ++c) {
    Tensor o = one.slice(c, c + 1);
    ops::cuda::sum_squares(x.slice(c * chunk, std::min(n, (c + 1) * chunk)), o, false, ctx.stream);
  }
  stream_sync(ctx.stream);
  fused::check_true(ctx, "optimizer", "sum_squares_chunks bitwise = per chunk " + sz,
                    fused::bitwise_equal(out, one));
}

// Model size: one AdamW step over 1.5e9 parameters (f32 master, grad, m, v + the bf16 copy), and the grad
// norm.
void model_size(Context& ctx, int64_t n) {
  constexpr int64_t kPool = int64_t{1} << 24;
  Tensor w = gpu_randn(ctx, {n}, DType::kF32, 1.0, kPool);
  Tensor g = gpu_randn(ctx, {n}, DType::kF32, 0.1, kPool);
  Tensor m = gpu_randn(ctx, {n}, DType::kF32, 0.01, kPool);
  Tensor v = Tensor::empty({n}, DType::kF32, ctx.stream);
  {
    Tensor pool = abs_randn(ctx, kPool, 1e-4).to(ctx.stream);
    for (int64_t off = 0; off < n; off += kPool) {
      Tensor dst = v.slice(off, std::min(n, off + kPool));
      dst.copy_from(pool.slice(0, dst.numel()), ctx.stream);
    }
  }
  Tensor copy = ctx.poisoned({n}, DType::kBF16);
  ops::AdamWParams p;
  p.weight_decay = 0.1f;
  p.step = 10;
  // Correctness on a slice that the full-size call also covers: its first 2^20 elements.
  const int64_t k = int64_t{1} << 20;
  Tensor w_ref = cpu_copy_f32(ctx, w.slice(0, k)), g_ref = cpu_copy_f32(ctx, g.slice(0, k));
  Tensor m_ref = cpu_copy_f32(ctx, m.slice(0, k)), v_ref = cpu_copy_f32(ctx, v.slice(0, k));
  Tensor c_ref = Tensor::empty({k}, DType::kBF16);
  ops::cuda::adamw_step(w, g, m, v, p, &copy, ctx.stream);
  ops::cpu::adamw_step(w_ref, g_ref, m_ref, v_ref, p, &c_ref, Stream::cpu());
  const std::string sz = "n=" + fused::size_str(n);
  ctx.check("optimizer", "adamw +bf16 copy master " + sz, w.slice(0, k), w_ref, kTolOpt,
            "first 2^20 checked");
  ctx.check("optimizer", "adamw +bf16 copy bf16 " + sz, copy.slice(0, k), c_ref, kTolBF16,
            "first 2^20 checked");
  double ms = ctx.time_ms([&] { ops::cuda::adamw_step(w, g, m, v, p, &copy, ctx.stream); }, 2, 5);
  fused::set_rate(ctx, ms, n * 30.0);

  Tensor out = ctx.poisoned({1}, DType::kF32);
  ops::cuda::sum_squares(g, out, false, ctx.stream);
  stream_sync(ctx.stream);
  // Reference: the f64 sum over the pool times the number of whole pools, plus the partial one.
  Tensor pool_ref = cpu_copy_f32(ctx, g.slice(0, std::min(n, kPool)));
  double pool_ss = 0, tail_ss = 0;
  const float* pp = pool_ref.data<float>();
  const int64_t whole = n / kPool, tail = n % kPool;
  for (int64_t i = 0; i < pool_ref.numel(); ++i) {
    pool_ss += static_cast<double>(pp[i]) * pp[i];
    if (i < tail) tail_ss += static_cast<double>(pp[i]) * pp[i];
  }
  Tensor ss_ref = Tensor::from_vector<float>({static_cast<float>(pool_ss * whole + tail_ss)}, {1});
  ctx.check("optimizer", "sum_squares " + sz, out, ss_ref, kTolOpt);
  ms = ctx.time_ms([&] { ops::cuda::sum_squares(g, out, false, ctx.stream); }, 2, 10);
  fused::set_rate(ctx, ms, n * 4.0);
}

}  // namespace

PRIMUS_GPU_TEST(optimizer) {
  adamw_case(ctx, 31, 0, true, 3);
  adamw_case(ctx, 1000, 1, true, 5);
  adamw_case(ctx, (int64_t{1} << 20) + 3, 0, true, 5);
  adamw_case(ctx, (int64_t{1} << 20) + 1, 1, false, 2);
  for (auto [n, off] : {std::pair<int64_t, int64_t>{1, 0},
                        {31, 0},
                        {1000, 1},
                        {(int64_t{1} << 22) + 5, 0},
                        {(int64_t{1} << 22) + 5, 1}}) {
    sum_squares_case(ctx, n, off);
  }
  for (auto [n, chunk, off] : {std::tuple<int64_t, int64_t, int64_t>{127, 31, 0},
                               {33, 64, 1},
                               {(int64_t{1} << 22) + 5, int64_t{1} << 20, 0},
                               {(int64_t{1} << 22) + 5, int64_t{1} << 20, 1},
                               {(int64_t{3} << 24) + 7, int64_t{1} << 24, 0}}) {
    sum_squares_chunks_case(ctx, n, chunk, off);
  }
  model_size(ctx, ctx.quick ? int64_t{100} * 1000 * 1000 : int64_t{1500} * 1000 * 1000);
}

}  // namespace primus::gputest
