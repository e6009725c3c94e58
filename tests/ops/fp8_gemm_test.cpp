// The FP8 GEMM's CPU reference against a naive f64 loop over dequantised elements (every scaling pair and
// format pairing, alpha, beta with and without a separate c_in, f32 and f64 outputs), a hand-computed case
// per layout, and every refusal of check_fp8_gemm with the message it must carry.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "op_test_util.h"
#include "ops/fp8.h"

namespace primus::test {
namespace {

using ops::Fp8Format;
using ops::Fp8Granularity;
using ops::Fp8Tensor;
using G = Fp8Granularity;
using F = Fp8Format;

// A random FP8 byte that is a finite value of format f (no NaN; no Inf and NaN for E5M2).
uint8_t random_fp8(Rng& rng, Fp8Format f) {
  for (;;) {
    const auto v = static_cast<uint8_t>(rng.integer(0, 255));
    if (f == F::kE4M3 && (v & 0x7f) == 0x7f) continue;
    if (f == F::kE5M2 && (v & 0x7c) == 0x7c) continue;
    return v;
  }
}

// A CPU operand [rows, cols] of random finite bytes and random positive multipliers in [1/8, 8].
Fp8Tensor random_operand(Rng& rng, int64_t rows, int64_t cols, Fp8Format f, Fp8Granularity g) {
  Fp8Tensor t = Fp8Tensor::empty(rows, cols, f, g, Stream::cpu());
  auto* q = static_cast<uint8_t*>(t.data.data_ptr());
  for (int64_t i = 0; i < t.data.numel(); ++i) q[i] = random_fp8(rng, f);
  float* s = t.scale_inv.data<float>();
  for (int64_t i = 0; i < t.scale_inv.numel(); ++i)
    s[i] = static_cast<float>(std::exp2(rng.uniform(-3.0, 3.0)));
  return t;
}

// Element (r, c) of an operand, dequantised in f64 straight from the layout table of ops/fp8.h.
double deq(const Fp8Tensor& t, int64_t r, int64_t c) {
  const auto* q = static_cast<const uint8_t*>(t.data.data_ptr());
  const float* s = t.scale_inv.data<float>();
  const int64_t rows = t.rows(), cols = t.cols(), kb = (cols + 127) / 128;
  double scale = 0;
  switch (t.granularity) {
    case G::kTensorwise:
      scale = s[0];
      break;
    case G::kRowwise:
      scale = s[r];
      break;
    case G::kBlock1x128:
      scale = s[(c / 128) * rows + r];
      break;
    case G::kBlock128x128:
      scale = s[(r / 128) * kb + c / 128];
      break;
  }
  return static_cast<double>(ops::fp8_to_float(q[r * cols + c], t.format)) * scale;
}

// c = alpha * deq(a) deq(b)^T + beta * c0, one plain f64 sum over K per element.
std::vector<double> naive_fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, const std::vector<double>& c0,
                                   double alpha, double beta) {
  const int64_t m = a.rows(), n = b.rows(), k = a.cols();
  std::vector<double> da(static_cast<size_t>(m * k)), db(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) da[i * k + p] = deq(a, i, p);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p) db[j * k + p] = deq(b, j, p);
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += da[i * k + p] * db[j * k + p];
      c[i * n + j] = alpha * acc + (beta != 0 ? beta * c0[i * n + j] : 0.0);
    }
  }
  return c;
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

std::string tag(const Fp8Tensor& a, const Fp8Tensor& b) {
  return fmt::format("a {} x b {}", a.describe(), b.describe());
}

TEST(Fp8Gemm, EveryScalingPairAndFormatMatchesNaiveLoop) {
  Rng rng;
  // Odd-but-legal sizes: M, N multiples of 16; K multiples of 16 (of 128 when blockwise). 144 rows spans two
  // 128-row blocks, the second partial; K = 384 has three K-blocks.
  using Mnk = std::array<int64_t, 3>;
  const std::vector<Mnk> plain = {{16, 48, 16}, {48, 16, 32}, {144, 48, 144}};
  const std::vector<Mnk> block = {{16, 48, 128}, {48, 144, 256}, {144, 48, 384}};
  int variant = 0;
  for (const Pair& pr : kPairs) {
    for (const Formats& fm : kFormats) {
      for (const Mnk& z : blockwise(pr) ? block : plain) {
        for (DType dt : float_types()) {
          const int64_t m = z[0], n = z[1], k = z[2];
          Fp8Tensor a = random_operand(rng, m, k, fm.a, pr.a), b = random_operand(rng, n, k, fm.b, pr.b);
          SCOPED_TRACE(fmt::format("{} -> {}", tag(a, b), dtype_name(dt)));
          // c's values at the scale of the product, so that beta's term weighs in the error.
          const std::vector<double> prod = naive_fp8_gemm(a, b, {}, 1.0, 0.0);
          const double rms = std::sqrt(dot(prod, prod) / static_cast<double>(prod.size()));
          Tensor c = rand_tensor(rng, {m, n}, dt, -rms, rms);
          const std::vector<double> c0 = host(c);
          const double alpha = rng.uniform(0.5, 2.0);
          // Rotate: beta = 0, beta in place (c_in = c), beta with a separate c_in.
          const int form = variant++ % 3;
          const double beta = form == 0 ? 0.0 : rng.uniform(-1.0, 1.0);
          Tensor c_in = clone(c);
          ops::fp8_gemm(a, b, c, static_cast<float>(alpha), static_cast<float>(beta), false, Stream::cpu(),
                        form == 2 ? &c_in : nullptr);
          const auto ref = naive_fp8_gemm(a, b, c0, static_cast<float>(alpha), static_cast<float>(beta));
          EXPECT_LT(rel_err(c, ref), fwd_tol(dt));
          if (form == 2) EXPECT_EQ(host(c_in), c0) << "c_in must be left unchanged";
        }
      }
    }
  }
}

// Values a person can check: a = 1.0 everywhere (e4m3 0x38), b = 2.0 (0x40), multipliers chosen per group.
TEST(Fp8Gemm, HandComputedValuesPerLayout) {
  const int64_t m = 144, n = 160, k = 384;  // 2 row blocks of a, 2 of b, 3 K-blocks
  auto filled_operand = [](int64_t rows, int64_t cols, uint8_t byte, G g) {
    Fp8Tensor t = Fp8Tensor::empty(rows, cols, F::kE4M3, g, Stream::cpu());
    std::memset(t.data.data_ptr(), byte, static_cast<size_t>(t.data.numel()));
    return t;
  };
  {  // tensorwise: c = K * (1 * 0.5) * (2 * 3) = 3K
    Fp8Tensor a = filled_operand(m, k, 0x38, G::kTensorwise), b = filled_operand(n, k, 0x40, G::kTensorwise);
    a.scale_inv.data<float>()[0] = 0.5f;
    b.scale_inv.data<float>()[0] = 3.0f;
    Tensor c = Tensor::empty({m, n}, DType::kF64);
    ops::fp8_gemm(a, b, c, 1.0f, 0.0f, false, Stream::cpu());
    for (double v : host(c)) ASSERT_EQ(v, 3.0 * k);
  }
  {  // rowwise: c[i, j] = K * 2 * (i + 1) * (j + 1)
    Fp8Tensor a = filled_operand(m, k, 0x38, G::kRowwise), b = filled_operand(n, k, 0x40, G::kRowwise);
    for (int64_t i = 0; i < m; ++i) a.scale_inv.data<float>()[i] = static_cast<float>(i + 1);
    for (int64_t j = 0; j < n; ++j) b.scale_inv.data<float>()[j] = static_cast<float>(j + 1);
    Tensor c = Tensor::empty({m, n}, DType::kF64);
    ops::fp8_gemm(a, b, c, 1.0f, 0.0f, false, Stream::cpu());
    const auto v = host(c);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(v[i * n + j], 2.0 * k * (i + 1) * (j + 1)) << i << "," << j;
  }
  {  // 1x128 a: scale_inv[kb, i] = kb + 1 + i / 1000 (rows fastest); 128x128 b: scale_inv[jb, kb] = 10^jb *
     // 2^kb
    Fp8Tensor a = filled_operand(m, k, 0x38, G::kBlock1x128),
              b = filled_operand(n, k, 0x40, G::kBlock128x128);
    const int64_t kb = k / 128;
    for (int64_t g = 0; g < kb; ++g)
      for (int64_t i = 0; i < m; ++i)
        a.scale_inv.data<float>()[g * m + i] = static_cast<float>(g + 1) + static_cast<float>(i) / 1024.0f;
    for (int64_t jb = 0; jb < 2; ++jb)
      for (int64_t g = 0; g < kb; ++g)
        b.scale_inv.data<float>()[jb * kb + g] = static_cast<float>(std::pow(10.0, jb) * std::exp2(g));
    Tensor c = Tensor::empty({m, n}, DType::kF64);
    ops::fp8_gemm(a, b, c, 1.0f, 0.0f, false, Stream::cpu());
    const auto v = host(c);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t g = 0; g < kb; ++g)
          want += 128.0 * 2.0 * (static_cast<double>(g + 1) + static_cast<double>(i) / 1024.0) *
                  (std::pow(10.0, j / 128) * std::exp2(g));
        ASSERT_EQ(v[i * n + j], want) << i << "," << j;
      }
    }
  }
  {  // 128x128 a x 1x128 b: a's scale_inv[ib, kb] = ib + 1, b's scale_inv[kb, j] = 1 / (kb + 1)
    Fp8Tensor a = filled_operand(m, k, 0x38, G::kBlock128x128),
              b = filled_operand(n, k, 0x40, G::kBlock1x128);
    const int64_t kb = k / 128;
    for (int64_t ib = 0; ib < 2; ++ib)
      for (int64_t g = 0; g < kb; ++g) a.scale_inv.data<float>()[ib * kb + g] = static_cast<float>(ib + 1);
    for (int64_t g = 0; g < kb; ++g)
      for (int64_t j = 0; j < n; ++j)
        b.scale_inv.data<float>()[g * n + j] = 0.25f * static_cast<float>(g + 1);
    Tensor c = Tensor::empty({m, n}, DType::kF64);
    ops::fp8_gemm(a, b, c, 1.0f, 0.0f, false, Stream::cpu());
    const auto v = host(c);
    for (int64_t i = 0; i < m; ++i) {
      double want = 0;
      for (int64_t g = 0; g < kb; ++g)
        want += 128.0 * 2.0 * static_cast<double>(i / 128 + 1) * 0.25 * (g + 1);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(v[i * n + j], want) << i << "," << j;
    }
  }
}

TEST(Fp8Gemm, BetaZeroNeverReadsC) {
  Rng rng;
  for (DType dt : float_types()) {
    Fp8Tensor a = random_operand(rng, 32, 64, F::kE4M3, G::kRowwise);
    Fp8Tensor b = random_operand(rng, 48, 64, F::kE5M2, G::kRowwise);
    Tensor c = filled({32, 48}, dt, std::numeric_limits<double>::quiet_NaN());
    ops::fp8_gemm(a, b, c, 1.0f, 0.0f, false, Stream::cpu());
    EXPECT_LT(rel_err(c, naive_fp8_gemm(a, b, {}, 1.0, 0.0)), fwd_tol(dt));
  }
}

TEST(Fp8Gemm, ThreadCountAndFastAccumDoNotChangeResults) {
  Rng rng;
  Fp8Tensor a = random_operand(rng, 144, 512, F::kE4M3, G::kBlock1x128);
  Fp8Tensor b = random_operand(rng, 272, 512, F::kE4M3, G::kBlock128x128);
  auto run = [&](bool fast) {
    Tensor c = Tensor::empty({144, 272}, DType::kF32);
    ops::fp8_gemm(a, b, c, 1.0f, 0.0f, fast, Stream::cpu());
    return host(c);
  };
  expect_thread_count_invariant([&] { return run(false); });
  EXPECT_EQ(run(true), run(false));
}

// ---- refusals: each names `what`, the operand, the value and what was expected ----

Fp8Tensor operand(int64_t rows, int64_t cols, F f = F::kE4M3, G g = G::kTensorwise) {
  Rng rng;
  return random_operand(rng, rows, cols, f, g);
}

TEST(Fp8GemmCheck, KMismatch) {
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 32), operand(16, 48), "layer3.fc1"),
                      "layer3.fc1: a and b must share K");
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 32), operand(16, 48), "layer3.fc1"), "K 32 vs 48");
}

TEST(Fp8GemmCheck, KMustBeAMultipleOf16) {
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 24), operand(16, 24), "qkv"),
                      "qkv: K = 24 must be a positive multiple of 16");
}

TEST(Fp8GemmCheck, BlockwiseKMustBeAMultipleOf128) {
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 144, F::kE4M3, G::kBlock1x128),
                                          operand(16, 144, F::kE4M3, G::kBlock1x128), "down"),
                      "down: K = 144 must be a positive multiple of 128 for blockwise scaling");
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 144, F::kE4M3, G::kBlock1x128),
                                          operand(16, 144, F::kE4M3, G::kBlock128x128), "down"),
                      "multiple of 128 for blockwise");
}

TEST(Fp8GemmCheck, NMustBeAMultipleOf16AndMAnyCount) {
  // M is the token rows (an MoE expert's routed count): any positive number.
  EXPECT_NO_THROW(ops::check_fp8_gemm(operand(24, 32), operand(16, 32), "o_proj"));
  EXPECT_NO_THROW(ops::check_fp8_gemm(operand(1, 32), operand(16, 32), "o_proj"));
  // ... but cuBLASLt needs a 1x128-scaled a's rows in multiples of 16.
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(24, 128, F::kE4M3, G::kBlock1x128),
                                          operand(16, 128, F::kE4M3, G::kBlock128x128), "experts"),
                      "experts: M = a's rows = 24 must be a multiple of 16 for a 1x128-scaled a");
  EXPECT_NO_THROW(ops::check_fp8_gemm(operand(32, 128, F::kE4M3, G::kBlock1x128),
                                      operand(16, 128, F::kE4M3, G::kBlock128x128), "experts"));
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 32), operand(40, 32), "o_proj"),
                      "o_proj: N = b's rows = 40 must be a positive multiple of 16");
}

TEST(Fp8GemmCheck, UnsupportedScalingPairs) {
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 128, F::kE4M3, G::kTensorwise),
                                          operand(16, 128, F::kE4M3, G::kRowwise), "gate_up"),
                      "gate_up: scaling pair a=tensorwise x b=rowwise is not supported");
  EXPECT_PRIMUS_ERROR(
      ops::check_fp8_gemm(operand(16, 128, F::kE4M3, G::kRowwise), operand(16, 128, F::kE4M3, G::kBlock1x128),
                          "gate_up"),
      "scaling pair a=rowwise x b=1x128 is not supported (supported: tensorwise x tensorwise");
}

TEST(Fp8GemmCheck, Block128x128TimesBlock128x128IsRefused) {
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(128, 256, F::kE4M3, G::kBlock128x128),
                                          operand(128, 256, F::kE4M3, G::kBlock128x128), "wgrad"),
                      "wgrad: scaling pair a=128x128 x b=128x128 is not supported: cuBLASLt on Hopper");
}

TEST(Fp8GemmCheck, E5M2TimesE5M2IsRefused) {
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 32, F::kE5M2), operand(16, 32, F::kE5M2), "dgrad"),
                      "dgrad: a and b are both e5m2");
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 32, F::kE5M2), operand(16, 32, F::kE5M2), "dgrad"),
                      "at least one e4m3 operand");
}

TEST(Fp8GemmCheck, ScaleInvShapeAndDtype) {
  Fp8Tensor a = operand(32, 256, F::kE4M3, G::kBlock1x128), b = operand(16, 256, F::kE4M3, G::kBlock128x128);
  Fp8Tensor bad = a;
  bad.scale_inv = Tensor::zeros({32, 2}, DType::kF32);  // [rows, K-blocks]: the transposed layout
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(bad, b, "fc2"),
                      "fc2: a.scale_inv must be [2, 32] for a 1x128 operand");
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(bad, b, "fc2"), "got f32[32, 2]");
  bad = b;
  bad.scale_inv = Tensor::zeros({1, 2}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(a, bad, "fc2"), "fc2: b.scale_inv must be f32, got f64[1, 2]");
  bad = b;
  bad.scale_inv = Tensor();
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(a, bad, "fc2"), "fc2: b.scale_inv is undefined");
  Fp8Tensor rw = operand(32, 64, F::kE4M3, G::kRowwise);
  rw.scale_inv = Tensor::zeros({1}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(rw, operand(16, 64, F::kE4M3, G::kRowwise), "fc2"),
                      "a.scale_inv must be [32] for a rowwise operand [32, 64], got f32[1]");
}

TEST(Fp8GemmCheck, DataDtypeMustMatchFormat) {
  Fp8Tensor a = operand(16, 32, F::kE4M3);
  a.format = F::kE5M2;
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(a, operand(16, 32), "attn"),
                      "attn: a.data is fp8e4m3[16, 32] on cpu but a.format is e5m2: expected fp8e5m2");
  Fp8Tensor b = operand(16, 32);
  b.data = Tensor::zeros({16, 32}, DType::kBF16);
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 32), b, "attn"), "attn: b.data is bf16[16, 32]");
  b.data = Tensor::zeros({16, 2, 16}, DType::kFP8E4M3);
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 32), b, "attn"), "attn: b.data must be 2-D [rows, K]");
}

TEST(Fp8GemmCheck, UndefinedOperand) {
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(Fp8Tensor{}, operand(16, 32), "lm_head"),
                      "lm_head: a is undefined");
  EXPECT_PRIMUS_ERROR(ops::check_fp8_gemm(operand(16, 32), Fp8Tensor{}, "lm_head"),
                      "lm_head: b is undefined");
}

TEST(Fp8GemmCheck, OutputMustBeFloatOfShapeMN) {
  Fp8Tensor a = operand(16, 32), b = operand(48, 32);
  Tensor c = Tensor::empty({16, 32}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::fp8_gemm(a, b, c, 1.0f, 0.0f, false, Stream::cpu()),
                      "fp8_gemm: c must be [16, 48]");
  Tensor c16 = Tensor::empty({16, 48}, DType::kBF16);
  EXPECT_PRIMUS_ERROR(ops::fp8_gemm(a, b, c16, 1.0f, 0.0f, false, Stream::cpu()),
                      "fp8_gemm: c must be f32 or f64");
  Tensor c_ok = Tensor::empty({16, 48}, DType::kF32), c_in = Tensor::empty({16, 48}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::fp8_gemm(a, b, c_ok, 1.0f, 1.0f, false, Stream::cpu(), &c_in),
                      "fp8_gemm: c_in must be f32");
}

}  // namespace
}  // namespace primus::test
