// Elementwise ops (add, scale_, cast, fill_, count_nonfinite) on the GPU against the CPU reference.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "gpu/fused_test_util.h"
#include "ops/cpu/elementwise_cpu.h"
#include "ops/cuda/elementwise_cuda.h"

namespace primus::gputest {
namespace {

using fused::cpu_copy_f32;
using fused::gpu_randn;

double tol_for(DType t) {
  return t == DType::kBF16 ? kTolBF16 : kTolF32;
}

// The GPU result of a bf16 op is the f32 reference rounded once; compare against that rounding.
Tensor rounded(const Tensor& ref, DType dt) {
  return dt == DType::kBF16 ? cpu_cast(cpu_cast(ref, DType::kBF16), DType::kF32) : ref;
}

void elementwise_case(Context& ctx, int64_t n, DType dt, int64_t offset, bool timed) {
  const std::string sz =
      fmt::format("n={} {}{}", fused::size_str(n), dtype_name(dt), offset ? " unaligned" : "");
  auto make = [&](double scale) {
    Tensor buf = gpu_randn(ctx, {n + offset}, dt, scale);
    return buf.slice(offset, offset + n);
  };
  const double es = static_cast<double>(dtype_size(dt));

  // add, and add into one of its inputs.
  Tensor a = make(1.0), b = make(1.0);
  Tensor af = cpu_copy_f32(ctx, a), bf = cpu_copy_f32(ctx, b);
  Tensor sum_ref = Tensor::empty({n}, DType::kF32);
  ops::cpu::add(af, bf, sum_ref, Stream::cpu());
  Tensor out = ctx.poisoned({n}, dt);
  ops::cuda::add(a, b, out, ctx.stream);
  ctx.check("elementwise", "add " + sz, out, sum_ref, tol_for(dt));
  if (timed) fused::set_rate(ctx, ctx.time_ms([&] { ops::cuda::add(a, b, out, ctx.stream); }), n * es * 3);
  ops::cuda::add(a, b, a, ctx.stream);
  ctx.check("elementwise", "add out=a " + sz, a, sum_ref, tol_for(dt));

  // scale_.
  Tensor x = make(1.0);
  Tensor xf = cpu_copy_f32(ctx, x);
  ops::cpu::scale_(xf, -0.375f, Stream::cpu());
  ops::cuda::scale_(x, -0.375f, ctx.stream);
  ctx.check("elementwise", "scale_ " + sz, x, xf, tol_for(dt));
  if (timed) fused::set_rate(ctx, ctx.time_ms([&] { ops::cuda::scale_(x, 1.0f, ctx.stream); }), n * es * 2);

  // fill_.
  Tensor y = ctx.poisoned({n}, dt);
  ops::cuda::fill_(y, 2.5f, ctx.stream);
  Tensor fill_ref = Tensor::empty({n}, DType::kF32);
  ops::cpu::fill_(fill_ref, 2.5f, Stream::cpu());
  ctx.check("elementwise", "fill_ " + sz, y, fill_ref, 0.0, "exact");
  if (timed) fused::set_rate(ctx, ctx.time_ms([&] { ops::cuda::fill_(y, 1.5f, ctx.stream); }), n * es);

  // cast to each other floating type.
  for (DType to : {DType::kF32, DType::kBF16, DType::kF64}) {
    if (to == dt) continue;
    Tensor src = make(3.0);
    Tensor srcf = cpu_copy_f32(ctx, src);
    Tensor dst = ctx.poisoned({n}, to);
    ops::cuda::cast(src, dst, ctx.stream);
    // f32 -> f64 and bf16 -> anything are exact; a narrowing cast rounds once.
    ctx.check("elementwise", fmt::format("cast {}->{} {}", dtype_name(dt), dtype_name(to), sz), dst,
              rounded(srcf, to), to == DType::kBF16 ? 0.0 : (dt == DType::kF64 ? kTolF32 : 0.0),
              "exact rounding");
    if (timed) {
      fused::set_rate(ctx, ctx.time_ms([&] { ops::cuda::cast(src, dst, ctx.stream); }),
                      n * (es + static_cast<double>(dtype_size(to))));
    }
  }

  // count_nonfinite: NaN, +inf and -inf at random places.
  Tensor z = make(1.0);
  Tensor zh = z.to(Stream::cpu());
  std::uniform_int_distribution<int64_t> pos(0, n - 1);
  const int planted = static_cast<int>(std::min<int64_t>(n, 7));
  std::set<int64_t> where;
  while (static_cast<int>(where.size()) < planted) where.insert(pos(ctx.rng));
  Tensor zf = cpu_copy_f32(ctx, zh);
  int k = 0;
  for (int64_t i : where) {
    zf.data<float>()[i] = k % 3 == 0 ? NAN : (k % 3 == 1 ? INFINITY : -INFINITY);
    ++k;
  }
  Tensor zd = cpu_cast(zf, dt);
  z.copy_from(zd, ctx.stream);
  const int64_t got = ops::cuda::count_nonfinite(z, ctx.stream);
  const int64_t want = ops::cpu::count_nonfinite(zf, Stream::cpu());
  fused::check_true(ctx, "elementwise", "count_nonfinite " + sz, got == want && want == planted,
                    fmt::format("got {}, want {}", got, want));
  if (timed) {
    fused::set_rate(ctx, ctx.time_ms([&] { ops::cuda::count_nonfinite(z, ctx.stream); }), n * es);
    ctx.results.back().note = "includes the host sync";
  }
}

}  // namespace

PRIMUS_GPU_TEST(elementwise) {
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{33}, int64_t{1000}, int64_t{127}})
      elementwise_case(ctx, n, dt, 0, false);
    elementwise_case(ctx, 1001, dt, 1, false);
    elementwise_case(ctx, int64_t{1} << 26, dt, 0, true);
  }
  elementwise_case(ctx, 999, DType::kF64, 0, false);
}

}  // namespace primus::gputest
