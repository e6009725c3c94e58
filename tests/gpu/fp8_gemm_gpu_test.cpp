// GPU tests of the FP8 GEMM (ops::cuda::fp8_gemm through cuBLASLt) against the CPU reference (exact f64 per
// element, src/ops/cpu/fp8_gemm.cpp) on the same FP8 bytes and multipliers: every scaling pair, e4m3 x e4m3,
// e4m3 x e5m2 and e5m2 x e4m3, bf16 and f32 outputs, beta = 1 accumulation into f32 (the weight gradient),
// alpha / beta with a separate c_in, fast accumulation on and off; the probe of the 128x128 scales' leading
// dimension (padded to a multiple of 4, as cuBLASLt reads it); refusals; and, unless --quick, Llama-3-8B
// layer shapes (M = 8192 tokens) timed in TFLOP/s next to the bf16 GEMM of the same shape, with sampled rows
// checked.
//
// Tolerances. The products of FP8 values are exact in the tensor cores, but their sum is not an f32 sum:
// Hopper's FP8 MMA adds products into an accumulator with about 13 mantissa bits, truncating (DeepSeek-V3
// report; the e8m13 accumulator of the published tensor-core models), and cuBLASLt without fast accumulation
// promotes those partial sums into f32 registers every few MMAs. An f32 output therefore errs by a few 2^-13
// (1.2e-4) of each partial sum rather than by f32 rounding, so 1e-5 -- what an f32 accumulation of the exact
// products would give -- is not what to expect: 1e-3 for f32 outputs. With fast accumulation the partial sums
// stay in the narrow accumulator over all of K and the truncation error grows with K (DeepSeek measured up to
// 2% at K = 4096): 5e-2. bf16 outputs: 1e-2 (one bf16 rounding, 2^-9, per element). The measured errors are
// printed, to tighten these once known; layout or scale mistakes give errors of order 1.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "bench/gemm_timing.h"
#include "core/cuda_check.h"
#include "gpu/gpu_test.h"
#include "gpu/sampled_rows.h"
#include "ops/cuda/fp8_gemm_cuda.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/fp8.h"

namespace primus::gputest {
namespace {

using ops::Fp8Format;
using ops::Fp8Granularity;
using ops::Fp8Tensor;
using G = Fp8Granularity;
using F = Fp8Format;
namespace cuda = ops::cuda;

constexpr const char* kFam = "fp8_gemm";
constexpr double kTolF32 = 1e-3;     // f32 output, cuBLASLt's promoted accumulation (see the file comment)
constexpr double kTolFast = 5e-2;    // any output with fast accumulation
constexpr double kTol16 = kTolBF16;  // bf16 output

double tol_for(DType out, bool fast_accum) {
  if (fast_accum) return kTolFast;
  return out == DType::kF32 ? kTolF32 : kTol16;
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A finite byte of format f: E4M3's NaNs (S.1111.111) become the largest finite value, E5M2's Inf/NaN
// exponent 11111 becomes 11110.
uint8_t finite_fp8(uint8_t v, F f) {
  if (f == F::kE4M3) return (v & 0x7f) == 0x7f ? static_cast<uint8_t>(v ^ 0x01) : v;
  return (v & 0x7c) == 0x7c ? static_cast<uint8_t>(v & ~0x04) : v;
}

// Random finite bytes (all of them, any exponent) into a host FP8 tensor; parallel and fast for 100M+ bytes.
void fill_bytes(Context& ctx, Fp8Tensor& t) {
  const uint64_t seed = ctx.rng();
  auto* q = static_cast<uint8_t*>(t.data.data_ptr());
  const int64_t n = t.data.numel();
  constexpr int64_t kBlock = 1 << 16;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < (n + kBlock - 1) / kBlock; ++blk) {
    uint64_t st = seed ^ (static_cast<uint64_t>(blk) * 0xd1b54a32d192ed03ull);
    for (int64_t i = blk * kBlock; i < std::min(n, (blk + 1) * kBlock); i += 8) {
      uint64_t r = splitmix(st);
      for (int64_t j = 0; j < 8 && i + j < n; ++j, r >>= 8)
        q[i + j] = finite_fp8(static_cast<uint8_t>(r), t.format);
    }
  }
}

// Random positive multipliers 2^U(-3, 3) into t.scale_inv (host).
void fill_scales(Context& ctx, Fp8Tensor& t) {
  std::uniform_real_distribution<double> ud(-3.0, 3.0);
  float* s = t.scale_inv.data<float>();
  for (int64_t i = 0; i < t.scale_inv.numel(); ++i) s[i] = static_cast<float>(std::exp2(ud(ctx.rng)));
}

Fp8Tensor host_operand(Context& ctx, int64_t rows, int64_t cols, F f, G g) {
  Fp8Tensor t = Fp8Tensor::empty(rows, cols, f, g, Stream::cpu());
  fill_bytes(ctx, t);
  fill_scales(ctx, t);
  return t;
}

// The same operand with another granularity's (fresh random) multipliers: the big shapes reuse their bytes.
Fp8Tensor regrouped(Context& ctx, const Fp8Tensor& t, G g) {
  Fp8Tensor r = t;
  r.granularity = g;
  r.scale_inv = Tensor::empty(ops::fp8_scale_shape(g, t.rows(), t.cols()), DType::kF32);
  fill_scales(ctx, r);
  return r;
}

Fp8Tensor upload(Context& ctx, const Fp8Tensor& h) {
  Fp8Tensor g = Fp8Tensor::empty(h.rows(), h.cols(), h.format, h.granularity, ctx.stream);
  device_copy(g.data.data_ptr(), g.data.device(), h.data.data_ptr(), Device::cpu(), h.data.nbytes(),
              ctx.stream);
  device_copy(g.scale_inv.data_ptr(), g.scale_inv.device(), h.scale_inv.data_ptr(), Device::cpu(),
              h.scale_inv.nbytes(), ctx.stream);
  return g;
}

// Rows `rows` of a host operand as an operand of its own (tensorwise, rowwise or 1x128: groups never span
// rows).
Fp8Tensor take_rows(const Fp8Tensor& h, const std::vector<int64_t>& rows) {
  const int64_t r = static_cast<int64_t>(rows.size()), k = h.cols(), kb = (k + 127) / 128;
  Fp8Tensor t = Fp8Tensor::empty(r, k, h.format, h.granularity, Stream::cpu());
  const auto* src = static_cast<const uint8_t*>(h.data.data_ptr());
  auto* dst = static_cast<uint8_t*>(t.data.data_ptr());
  const float* ss = h.scale_inv.data<float>();
  float* ds = t.scale_inv.data<float>();
  for (int64_t i = 0; i < r; ++i) std::memcpy(dst + i * k, src + rows[i] * k, static_cast<size_t>(k));
  switch (h.granularity) {
    case G::kTensorwise:
      ds[0] = ss[0];
      break;
    case G::kRowwise:
      for (int64_t i = 0; i < r; ++i) ds[i] = ss[rows[i]];
      break;
    case G::kBlock1x128:
      for (int64_t g = 0; g < kb; ++g)
        for (int64_t i = 0; i < r; ++i) ds[g * r + i] = ss[g * h.rows() + rows[i]];
      break;
    case G::kBlock128x128:
      PRIMUS_FAIL("take_rows: a 128x128 operand's rows do not stand alone");
  }
  return t;
}

// CPU reference c [M, N] in f64: alpha * deq(a) deq(b)^T + beta * c0 (c0: host tensor of c's values).
Tensor reference(const Fp8Tensor& a, const Fp8Tensor& b, float alpha, float beta, const Tensor* c0) {
  Tensor c = Tensor::empty({a.rows(), b.rows()}, DType::kF64);
  Tensor c_in;
  if (c0 != nullptr) c_in = c0->dtype() == DType::kF64 ? *c0 : cpu_cast(*c0, DType::kF64);
  ops::fp8_gemm(a, b, c, alpha, beta, false, Stream::cpu(), c0 != nullptr ? &c_in : nullptr);
  return c;
}

// `count` distinct sorted rows including the first and the last.
std::vector<int64_t> sample_rows(Context& ctx, int64_t n, int count) {
  std::vector<int64_t> r = {0, n - 1};
  std::uniform_int_distribution<int64_t> ud(1, n - 2);
  while (static_cast<int>(r.size()) < count) {
    const int64_t x = ud(ctx.rng);
    if (std::find(r.begin(), r.end(), x) == r.end()) r.push_back(x);
  }
  std::sort(r.begin(), r.end());
  return r;
}

// A failing checked row carrying the exception's text (a cuBLASLt refusal is a finding, not a crash).
void record_failure(Context& ctx, const std::string& name, const std::exception& e) {
  ctx.record(kFam, name, INFINITY, 0, fmt::format("threw: {}", e.what()));
}

// Every scaling pair the FP8 GEMM takes.
using Pair = ops::Fp8ScalingPair;
constexpr const auto& kPairs = ops::kFp8GemmPairs;
struct Formats {
  F a, b;
};
const Formats kFormats[] = {{F::kE4M3, F::kE4M3}, {F::kE4M3, F::kE5M2}, {F::kE5M2, F::kE4M3}};

bool blockwise(const Pair& p) {
  return p.a != G::kTensorwise && p.a != G::kRowwise;
}

std::string pair_name(const Pair& p) {
  return fmt::format("{}x{}", ops::fp8_granularity_name(p.a), ops::fp8_granularity_name(p.b));
}

// Random c values at the scale of a b^T (its RMS), so that beta's term weighs in the error.
Tensor product_sized(Context& ctx, const Fp8Tensor& a, const Fp8Tensor& b, DType dtype) {
  const std::vector<double> p = reference(a, b, 1.0f, 0.0f, nullptr).to_vector<double>();
  double sq = 0;
  for (double v : p) sq += v * v;
  return ctx.randn_cpu({a.rows(), b.rows()}, dtype, std::sqrt(sq / static_cast<double>(p.size())));
}

// One GEMM on the GPU against the reference: c = alpha a b^T + beta c0 (c0 random, in place when given).
void check_case(Context& ctx, const std::string& name, const Fp8Tensor& ha, const Fp8Tensor& hb, DType out,
                float alpha, float beta, bool fast_accum, bool with_c0) {
  try {
    Fp8Tensor ga = upload(ctx, ha), gb = upload(ctx, hb);
    const int64_t m = ha.rows(), n = hb.rows();
    std::optional<Tensor> c0;
    Tensor gc;
    if (with_c0) {
      c0 = product_sized(ctx, ha, hb, out);
      gc = c0->to(ctx.stream);
    } else {
      gc = ctx.poisoned({m, n}, out);
    }
    cuda::fp8_gemm(ga, gb, gc, alpha, beta, fast_accum, ctx.stream, nullptr);
    ctx.check(kFam, name, gather_rows(ctx, gc, all_rows(m)),
              reference(ha, hb, alpha, beta, c0 ? &*c0 : nullptr), tol_for(out, fast_accum));
  } catch (const std::exception& e) {
    record_failure(ctx, name, e);
  }
}

// ---- every scaling pair x format pairing x output dtype (beta = 0) ----
void pair_cases(Context& ctx) {
  for (const Pair& pr : kPairs) {
    // Blockwise: K = 1024 (8 K-blocks, a multiple of 4: the 128x128 scales' two candidate leading dimensions
    // coincide here; the probe below separates them). 144 and 272 rows end in partial 128-row blocks.
    const int64_t m = 144, n = blockwise(pr) ? 272 : 208, k = blockwise(pr) ? 1024 : 272;
    for (const Formats& fm : kFormats) {
      Fp8Tensor a = host_operand(ctx, m, k, fm.a, pr.a), b = host_operand(ctx, n, k, fm.b, pr.b);
      for (DType out : {DType::kBF16, DType::kF32}) {
        check_case(ctx,
                   fmt::format("{} {}x{} {}x{}x{} ->{}", pair_name(pr), ops::fp8_format_name(fm.a),
                               ops::fp8_format_name(fm.b), m, n, k, dtype_name(out)),
                   a, b, out, 1.0f, 0.0f, false, false);
      }
    }
  }
}

// ---- token counts that are not multiples of 16 (an MoE expert's routed rows, model/fp8_experts.h) ----
void odd_rows_cases(Context& ctx) {
  for (const Pair& pr : kPairs) {
    // A 1x128-scaled a needs rows in multiples of 16 (check_fp8_gemm refuses the rest: cuBLASLt has no
    // kernel, measured 2026-11-28).
    if (pr.a == G::kBlock1x128) continue;
    const int64_t n = blockwise(pr) ? 256 : 208, k = blockwise(pr) ? 512 : 272;
    for (int64_t m : {1, 31, 33, 127}) {
      Fp8Tensor a = host_operand(ctx, m, k, F::kE4M3, pr.a), b = host_operand(ctx, n, k, F::kE4M3, pr.b);
      check_case(ctx, fmt::format("{} odd rows {}x{}x{} ->bf16", pair_name(pr), m, n, k), a, b, DType::kBF16,
                 1.0f, 0.0f, pr.a == G::kTensorwise, false);
    }
  }
}

// ---- beta = 1 into f32 (weight gradient: dw[out, in] += dy^T x^T, dy e5m2, x e4m3), alpha / beta with c
// ----
void accumulate_cases(Context& ctx) {
  for (const Pair& pr : kPairs) {
    const int64_t m = 272, n = 144, k = 1024;
    Fp8Tensor a = host_operand(ctx, m, k, F::kE5M2, pr.a), b = host_operand(ctx, n, k, F::kE4M3, pr.b);
    check_case(ctx, fmt::format("{} e5m2xe4m3 {}x{}x{} f32 += (wgrad)", pair_name(pr), m, n, k), a, b,
               DType::kF32, 1.0f, 1.0f, false, true);
  }
  {  // alpha / beta with a separate c_in, bf16 and f32
    const int64_t m = 144, n = 208, k = 272;
    Fp8Tensor ha = host_operand(ctx, m, k, F::kE4M3, G::kTensorwise);
    Fp8Tensor hb = host_operand(ctx, n, k, F::kE4M3, G::kTensorwise);
    for (DType out : {DType::kBF16, DType::kF32}) {
      const std::string name = fmt::format("tensorwise alpha=.5 beta=.75 c_in ->{}", dtype_name(out));
      try {
        Fp8Tensor ga = upload(ctx, ha), gb = upload(ctx, hb);
        Tensor c0 = product_sized(ctx, ha, hb, out);
        Tensor gcin = c0.to(ctx.stream), gc = ctx.poisoned({m, n}, out);
        cuda::fp8_gemm(ga, gb, gc, 0.5f, 0.75f, false, ctx.stream, &gcin);
        ctx.check(kFam, name, gather_rows(ctx, gc, all_rows(m)), reference(ha, hb, 0.5f, 0.75f, &c0),
                  tol_for(out, false));
      } catch (const std::exception& e) {
        record_failure(ctx, name, e);
      }
    }
  }
}

// ---- fast accumulation on and off (tensorwise), K = 4096 where the accumulator's width shows ----
void fast_accum_cases(Context& ctx) {
  const int64_t m = 256, n = 256, k = 4096;
  Fp8Tensor a = host_operand(ctx, m, k, F::kE4M3, G::kTensorwise);
  Fp8Tensor b = host_operand(ctx, n, k, F::kE4M3, G::kTensorwise);
  for (bool fast : {false, true})
    for (DType out : {DType::kBF16, DType::kF32})
      check_case(ctx,
                 fmt::format("tensorwise e4m3 {}x{}x{} ->{} fast_accum={}", m, n, k, dtype_name(out), fast),
                 a, b, out, 1.0f, 0.0f, fast, false);
}

// ---- the 128x128 scales' leading dimension ----
// K = 640 gives 5 K-blocks: cuBLASLt reads the scales with ld rounded up to 8 here (measured 2026-11-27: the
// unpadded ld gave rel_err 0.42 / 5e23), so this checks the padded copy fp8_gemm makes.
void block_scale_ld_case(Context& ctx) {
  const int64_t m = 256, n = 384, k = 640;
  const Pair probes[] = {{G::kBlock1x128, G::kBlock128x128}, {G::kBlock128x128, G::kBlock1x128}};
  for (const Pair& pr : probes) {
    Fp8Tensor ha = host_operand(ctx, m, k, F::kE4M3, pr.a), hb = host_operand(ctx, n, k, F::kE4M3, pr.b);
    const Tensor ref = reference(ha, hb, 1.0f, 0.0f, nullptr);
    const std::string name = fmt::format("{} {}x{}x{} (5 K-blocks: padded scale ld)", pair_name(pr), m, n, k);
    try {
      Fp8Tensor ga = upload(ctx, ha), gb = upload(ctx, hb);
      Tensor gc = ctx.poisoned({m, n}, DType::kF32);
      cuda::fp8_gemm(ga, gb, gc, 1.0f, 0.0f, false, ctx.stream, nullptr);
      ctx.check(kFam, name, gather_rows(ctx, gc, all_rows(m)), ref, kTolF32);
    } catch (const std::exception& e) {
      record_failure(ctx, name, e);
    }
  }
}

// ---- refusals on the GPU path ----
void validation_cases(Context& ctx) {
  Fp8Tensor ha = host_operand(ctx, 32, 128, F::kE4M3, G::kTensorwise);
  Fp8Tensor hb = host_operand(ctx, 48, 128, F::kE4M3, G::kTensorwise);
  Fp8Tensor ga = upload(ctx, ha), gb = upload(ctx, hb);
  auto throws = [](auto&& fn) {
    try {
      fn();
    } catch (const Error&) {
      return true;
    }
    return false;
  };
  Tensor c64 = ctx.poisoned({32, 48}, DType::kF64), cbad = ctx.poisoned({48, 32}, DType::kBF16);
  Tensor ccpu = Tensor::empty({32, 48}, DType::kBF16), cok = ctx.poisoned({32, 48}, DType::kBF16);
  Fp8Tensor g55 = gb;
  g55.format = F::kE5M2;
  const bool ok = throws([&] { cuda::fp8_gemm(ga, gb, c64, 1, 0, false, ctx.stream, nullptr); }) &&
                  throws([&] { cuda::fp8_gemm(ga, gb, cbad, 1, 0, false, ctx.stream, nullptr); }) &&
                  throws([&] { cuda::fp8_gemm(ga, gb, ccpu, 1, 0, false, ctx.stream, nullptr); }) &&
                  throws([&] { cuda::fp8_gemm(ha, gb, cok, 1, 0, false, ctx.stream, nullptr); }) &&
                  throws([&] { ops::fp8_gemm(ga, hb, cok, 1, 0, false, ctx.stream); }) &&
                  throws([&] { cuda::fp8_gemm(ga, g55, cok, 1, 0, false, ctx.stream, nullptr); });
  ctx.record(kFam, "c dtype/shape/device, operand device, format refused", ok ? 0.0 : INFINITY, 0);
}

// ---- Llama-3-8B layer GEMMs at 8192 tokens: FP8 vs bf16 TFLOP/s, sampled rows checked ----
void model_size_cases(Context& ctx) {
  struct Shape3 {
    const char* name;
    int64_t n, k;
  };
  const int64_t m = 8192;
  const Shape3 shapes[] = {
      {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  struct Variant {
    const char* name;
    G a, b;
    bool fast;
  };
  const Variant variants[] = {{"tensorwise", G::kTensorwise, G::kTensorwise, false},
                              {"tensorwise fast_accum", G::kTensorwise, G::kTensorwise, true},
                              {"rowwise", G::kRowwise, G::kRowwise, false},
                              {"blockwise 1x128x128x128", G::kBlock1x128, G::kBlock128x128, false}};
  for (const Shape3& sh : shapes) {
    const double flops = 2.0 * m * sh.n * sh.k;
    const std::string shape = fmt::format("{}x{}x{}", m, sh.n, sh.k);
    double bf16_ms = 0;
    try {  // the bf16 GEMM of the same shape and layout (x [M, K] w [N, K]^T), through ops::gemm / lt
      Tensor x = Tensor::empty({m, sh.k}, DType::kBF16, ctx.stream),
             w = Tensor::empty({sh.n, sh.k}, DType::kBF16, ctx.stream);
      Tensor y = Tensor::empty({m, sh.n}, DType::kBF16, ctx.stream);
      bench::fill_random(x.data_ptr(), static_cast<size_t>(x.numel()), DType::kBF16, ctx.rng(), ctx.stream);
      bench::fill_random(w.data_ptr(), static_cast<size_t>(w.numel()), DType::kBF16, ctx.rng(), ctx.stream);
      bf16_ms = ctx.time_ms([&] { cuda::gemm(x, false, w, true, y, 1.0f, 0.0f, ctx.stream, nullptr); });
      ctx.timing(kFam, fmt::format("8B {} bf16 {}", sh.name, shape), bf16_ms, flops / (bf16_ms * 1e-3) / 1e12,
                 "TFLOP/s", "ops::cuda::gemm (bf16 in, bf16 out), the baseline");
    } catch (const std::exception& e) {
      record_failure(ctx, fmt::format("8B {} bf16 {}", sh.name, shape), e);
    }
    Fp8Tensor a_bytes = Fp8Tensor::empty(m, sh.k, F::kE4M3, G::kTensorwise, Stream::cpu());
    Fp8Tensor b_bytes = Fp8Tensor::empty(sh.n, sh.k, F::kE4M3, G::kTensorwise, Stream::cpu());
    fill_bytes(ctx, a_bytes);
    fill_bytes(ctx, b_bytes);
    for (const Variant& v : variants) {
      const std::string name = fmt::format("8B {} fp8 {} {}", sh.name, v.name, shape);
      try {
        Fp8Tensor ha = regrouped(ctx, a_bytes, v.a), hb = regrouped(ctx, b_bytes, v.b);
        Fp8Tensor ga = upload(ctx, ha), gb = upload(ctx, hb);
        Tensor gc = ctx.poisoned({m, sh.n}, DType::kBF16);
        auto run = [&] { cuda::fp8_gemm(ga, gb, gc, 1.0f, 0.0f, v.fast, ctx.stream, nullptr); };
        run();
        const auto rows = sample_rows(ctx, m, 16);
        ctx.check(kFam, name + " (16 rows)", gather_rows(ctx, gc, rows),
                  reference(take_rows(ha, rows), hb, 1.0f, 0.0f, nullptr), tol_for(DType::kBF16, v.fast));
        const double ms = ctx.time_ms(run);
        ctx.timing(kFam, name, ms, flops / (ms * 1e-3) / 1e12, "TFLOP/s",
                   fmt::format("{:.2f}x bf16; {}", bf16_ms > 0 ? bf16_ms / ms : 0.0,
                               cuda::fp8_gemm_algo(ga, gb, gc, v.fast, ctx.stream)));
      } catch (const std::exception& e) {
        record_failure(ctx, name, e);
      }
    }
  }
}

}  // namespace
}  // namespace primus::gputest

PRIMUS_GPU_TEST(fp8_gemm) {
  using namespace primus::gputest;
  pair_cases(ctx);
  odd_rows_cases(ctx);
  accumulate_cases(ctx);
  fast_accum_cases(ctx);
  block_scale_ld_case(ctx);
  validation_cases(ctx);
  if (!ctx.quick) model_size_cases(ctx);
}
