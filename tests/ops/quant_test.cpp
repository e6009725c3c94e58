// The FP8 formats and the quantize family on the CPU (ops/fp8.h): the scalar conversions bit by bit (every
// byte, every midpoint, saturation, NaN, subnormals), and quantize / dequantize / amax against a naive
// emulation written from fp8.h's table, for every granularity of out and out_t, f32 and f64, odd and aligned
// sizes.
#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "op_test_util.h"
#include "ops/cpu/quant_cpu.h"
#include "ops/fp8.h"

namespace primus::test {
namespace {

using ops::Fp8Format;
using ops::Fp8Granularity;
using ops::Fp8Tensor;
using ops::QuantizeArgs;

constexpr Fp8Format kFormats[] = {Fp8Format::kE4M3, Fp8Format::kE5M2};
constexpr Fp8Granularity kGrans[] = {Fp8Granularity::kTensorwise, Fp8Granularity::kRowwise,
                                     Fp8Granularity::kBlock1x128, Fp8Granularity::kBlock128x128};
const float kInf = std::numeric_limits<float>::infinity();
const float kNaNf = std::numeric_limits<float>::quiet_NaN();

uint8_t max_byte(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? 0x7e : 0x7b;
}
int mant_bits(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? 3 : 2;
}
int min_exp(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? -6 : -14;
}

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// ---------------------------------------------------------------------------------------------------------------
// Scalar conversions.

TEST(Fp8Format, RoundTripEveryByte) {
  for (Fp8Format f : kFormats) {
    int finite = 0;
    for (int b = 0; b < 256; ++b) {
      const float v = ops::fp8_to_float(static_cast<uint8_t>(b), f);
      if (std::isnan(v)) continue;
      if (std::isinf(v)) {  // E5M2's infinities saturate like any value past the largest finite one
        EXPECT_EQ(ops::float_to_fp8(v, f), (b & 0x80) | max_byte(f))
            << ops::fp8_format_name(f) << " byte " << b;
        continue;
      }
      ++finite;
      EXPECT_EQ(ops::float_to_fp8(v, f), b) << ops::fp8_format_name(f) << " byte " << b << " value " << v;
    }
    // E4M3: 256 - 2 NaNs; E5M2: 256 - 2 infinities - 6 NaNs.
    EXPECT_EQ(finite, f == Fp8Format::kE4M3 ? 254 : 248) << ops::fp8_format_name(f);
  }
}

TEST(Fp8Format, TiesToEvenAtMidpoints) {
  for (Fp8Format f : kFormats) {
    for (int b = 0; b < max_byte(f); ++b) {
      for (uint8_t sign : {uint8_t{0x00}, uint8_t{0x80}}) {
        const uint8_t lo = sign | static_cast<uint8_t>(b), hi = sign | static_cast<uint8_t>(b + 1);
        const float a = ops::fp8_to_float(lo, f), c = ops::fp8_to_float(hi, f);
        const float mid = (a + c) / 2;  // exact: a few significant bits
        ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(a) + c) / 2);
        const uint8_t even = (b % 2 == 0) ? lo : hi;
        SCOPED_TRACE(
            fmt::format("{} between {:#04x} ({}) and {:#04x} ({})", ops::fp8_format_name(f), lo, a, hi, c));
        EXPECT_EQ(ops::float_to_fp8(mid, f), even);
        EXPECT_EQ(ops::float_to_fp8(std::nextafter(mid, a), f), lo);
        EXPECT_EQ(ops::float_to_fp8(std::nextafter(mid, c), f), hi);
      }
    }
  }
}

// float_to_fp8 (bit arithmetic) against float_to_fp8_reference (f64 arithmetic, the stated rounding): every
// 997th of the 2^32 float patterns (every exponent, both signs, NaNs, infinities, float subnormals), and at
// each pair of neighbouring FP8 values the midpoint and the floats next to it and to both values.
TEST(Fp8Format, FastCastEqualsTheReferenceEverywhere) {
  for (Fp8Format f : kFormats) {
    SCOPED_TRACE(ops::fp8_format_name(f));
    int64_t wrong = 0;
    auto check = [&](float x) {
      const uint8_t fast = ops::float_to_fp8(x, f), ref = ops::float_to_fp8_reference(x, f);
      if (fast != ref && ++wrong <= 5)
        ADD_FAILURE() << fmt::format("{:a} (bits {:#010x}): {:#04x}, reference {:#04x}", x,
                                     std::bit_cast<uint32_t>(x), fast, ref);
    };
    for (uint64_t u = 0; u <= 0xffffffffu; u += 997) check(std::bit_cast<float>(static_cast<uint32_t>(u)));
    for (int b = 0; b < max_byte(f); ++b)
      for (uint8_t sign : {uint8_t{0x00}, uint8_t{0x80}}) {
        const float a = ops::fp8_to_float(sign | static_cast<uint8_t>(b), f);
        const float c = ops::fp8_to_float(sign | static_cast<uint8_t>(b + 1), f);
        const float mid = (a + c) / 2;
        for (float x : {a, c, mid})
          for (float y : {x, std::nextafter(x, -kInf), std::nextafter(x, kInf)}) check(y);
      }
    EXPECT_EQ(wrong, 0);
  }
}

TEST(Fp8Format, SaturationAndNaN) {
  const float big[] = {448.0f, 449.0f, 464.0f, 470.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(), kInf};
  for (float v : big) {
    EXPECT_EQ(ops::float_to_fp8(v, Fp8Format::kE4M3), 0x7e) << v;
    EXPECT_EQ(ops::float_to_fp8(-v, Fp8Format::kE4M3), 0xfe) << -v;
  }
  const float big5[] = {57344.0f, 60000.0f, 61440.0f, 65536.0f, 1e30f, kInf};
  for (float v : big5) {
    EXPECT_EQ(ops::float_to_fp8(v, Fp8Format::kE5M2), 0x7b) << v;
    EXPECT_EQ(ops::float_to_fp8(-v, Fp8Format::kE5M2), 0xfb) << -v;
  }
  // Just below the largest finite value rounds to it or to its neighbour, never saturates early.
  EXPECT_EQ(ops::float_to_fp8(431.0f, Fp8Format::kE4M3), 0x7d);  // 416 is 0x7d, 432 the midpoint
  EXPECT_EQ(ops::float_to_fp8(433.0f, Fp8Format::kE4M3), 0x7e);
  for (Fp8Format f : kFormats) {
    EXPECT_EQ(ops::float_to_fp8(kNaNf, f), 0x7f);
    EXPECT_EQ(ops::float_to_fp8(-kNaNf, f), 0x7f);
    EXPECT_TRUE(std::isnan(ops::fp8_to_float(0x7f, f)));
    EXPECT_TRUE(std::isnan(ops::fp8_to_float(0xff, f)));
    EXPECT_EQ(ops::fp8_to_float(max_byte(f), f), ops::fp8_max(f));
  }
  EXPECT_EQ(ops::fp8_to_float(0x7c, Fp8Format::kE5M2), kInf);
  EXPECT_EQ(ops::fp8_to_float(0xfc, Fp8Format::kE5M2), -kInf);
}

TEST(Fp8Format, SubnormalsAndHandValues) {
  const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
  const float s4 = std::ldexp(1.0f, -9), s5 = std::ldexp(1.0f, -16);  // the smallest subnormals
  EXPECT_EQ(ops::float_to_fp8(0.001953125f, e4), 0x01);
  EXPECT_EQ(ops::fp8_to_float(0x01, e4), 0.001953125f);
  EXPECT_EQ(ops::float_to_fp8(s4 / 2, e4), 0x00);                        // tie with 0: even
  EXPECT_EQ(ops::float_to_fp8(std::nextafter(s4 / 2, 1.0f), e4), 0x01);  // just above the tie
  EXPECT_EQ(ops::float_to_fp8(3 * s4 / 2, e4), 0x02);                    // tie 1 | 2: even
  EXPECT_EQ(ops::float_to_fp8(5 * s4 / 2, e4), 0x02);                    // tie 2 | 3: even
  EXPECT_EQ(ops::float_to_fp8(7 * s4, e4), 0x07);                        // largest subnormal
  EXPECT_EQ(ops::float_to_fp8(15 * s4 / 2, e4), 0x08);                   // tie 7 | min normal: even
  EXPECT_EQ(ops::fp8_to_float(0x08, e4), std::ldexp(1.0f, -6));
  EXPECT_EQ(ops::float_to_fp8(-s4, e4), 0x81);
  EXPECT_EQ(ops::float_to_fp8(1e-30f, e4), 0x00);
  EXPECT_EQ(ops::float_to_fp8(-1e-30f, e4), 0x80);
  EXPECT_EQ(ops::float_to_fp8(std::numeric_limits<float>::denorm_min(), e4), 0x00);
  EXPECT_EQ(ops::float_to_fp8(-0.0f, e4), 0x80);
  EXPECT_EQ(ops::float_to_fp8(s5, e5), 0x01);
  EXPECT_EQ(ops::float_to_fp8(s5 / 2, e5), 0x00);
  EXPECT_EQ(ops::float_to_fp8(3 * s5, e5), 0x03);
  EXPECT_EQ(ops::float_to_fp8(std::ldexp(1.0f, -14), e5), 0x04);
  // Hand-computed normals.
  EXPECT_EQ(ops::float_to_fp8(448.0f, e4), 0x7e);
  EXPECT_EQ(ops::float_to_fp8(1.0f, e4), 0x38);
  EXPECT_EQ(ops::float_to_fp8(-2.0f, e4), 0xc0);
  EXPECT_EQ(ops::float_to_fp8(0.1f, e4), 0x1d);  // 1.6 * 2^-4 -> 1.625 * 2^-4
  EXPECT_EQ(ops::fp8_to_float(0x1d, e4), 0.1015625f);
  EXPECT_EQ(ops::float_to_fp8(57344.0f, e5), 0x7b);
  EXPECT_EQ(ops::float_to_fp8(1.0f, e5), 0x3c);
  EXPECT_EQ(ops::float_to_fp8(0.1f, e5), 0x2e);  // 1.6 * 2^-4 -> 1.5 * 2^-4
  EXPECT_EQ(ops::fp8_to_float(0x2e, e5), 0.09375f);
}

TEST(Fp8Format, ScaleShapes) {
  EXPECT_EQ(ops::fp8_scale_shape(Fp8Granularity::kTensorwise, 300, 257), (Shape{1}));
  EXPECT_EQ(ops::fp8_scale_shape(Fp8Granularity::kRowwise, 300, 257), (Shape{300}));
  EXPECT_EQ(ops::fp8_scale_shape(Fp8Granularity::kBlock1x128, 300, 257), (Shape{3, 300}));
  EXPECT_EQ(ops::fp8_scale_shape(Fp8Granularity::kBlock128x128, 300, 257), (Shape{3, 3}));
  EXPECT_EQ(ops::fp8_scale_shape(Fp8Granularity::kBlock1x128, 31, 128), (Shape{1, 31}));
  EXPECT_EQ(ops::fp8_scale_shape(Fp8Granularity::kBlock1x128, 31, 129), (Shape{2, 31}));
  EXPECT_EQ(ops::fp8_scale_shape(Fp8Granularity::kBlock128x128, 129, 128), (Shape{2, 1}));
  // out_t of x [R, C] is [C, R]: its 1x128 groups run down x's columns.
  const Fp8Tensor t = Fp8Tensor::empty(33, 300, Fp8Format::kE5M2, Fp8Granularity::kBlock1x128, Stream::cpu());
  EXPECT_EQ(t.data.dtype(), DType::kFP8E5M2);
  EXPECT_EQ(t.scale_inv.shape(), (Shape{3, 33}));
  EXPECT_EQ(t.describe(), "e5m2 1x128 [33, 300] on cpu");
}

// ---------------------------------------------------------------------------------------------------------------
// A naive emulation of quantize written from fp8.h's table: y = x (out) or x^T (out_t), grouped along y's
// rows.

int64_t group_key(Fp8Granularity g, int64_t i, int64_t j, int64_t n, int64_t k) {
  switch (g) {
    case Fp8Granularity::kTensorwise:
      return 0;
    case Fp8Granularity::kRowwise:
      return i;
    case Fp8Granularity::kBlock1x128:
      return (j / 128) * n + i;
    case Fp8Granularity::kBlock128x128:
      return (i / 128) * ((k + 127) / 128) + j / 128;
  }
  return -1;
}

struct Naive {
  std::vector<uint8_t> q;
  std::vector<float> scale_inv;
  std::vector<float> y;  // the f32 values that were cast, [n, k]
  int64_t n = 0, k = 0;
};

float nan_max(float a, float b) {
  return (std::isnan(a) || std::isnan(b)) ? kNaNf : std::max(a, b);
}

Naive naive_quantize(const std::vector<float>& x, int64_t rows, int64_t cols, bool transposed,
                     Fp8Granularity g, Fp8Format f, const float* given) {
  Naive r;
  r.n = transposed ? cols : rows;
  r.k = transposed ? rows : cols;
  r.y.resize(x.size());
  for (int64_t i = 0; i < r.n; ++i)
    for (int64_t j = 0; j < r.k; ++j) r.y[i * r.k + j] = transposed ? x[j * cols + i] : x[i * cols + j];
  const int64_t groups = shape_numel(ops::fp8_scale_shape(g, r.n, r.k));
  std::vector<float> amax(groups, 0.f);
  for (int64_t i = 0; i < r.n; ++i)
    for (int64_t j = 0; j < r.k; ++j) {
      float& a = amax[group_key(g, i, j, r.n, r.k)];
      a = nan_max(a, std::fabs(r.y[i * r.k + j]));
    }
  std::vector<float> scale(groups);
  for (int64_t gi = 0; gi < groups; ++gi) {
    float s = 1.0f;
    if (given != nullptr) {
      s = *given;
    } else if (std::isfinite(amax[gi]) && amax[gi] > 0) {
      s = ops::fp8_max(f) / amax[gi];
      if (std::isinf(s)) s = std::numeric_limits<float>::max();
    }
    scale[gi] = s;
    r.scale_inv.push_back(1.0f / s);
  }
  for (int64_t i = 0; i < r.n; ++i)
    for (int64_t j = 0; j < r.k; ++j)
      r.q.push_back(ops::float_to_fp8(r.y[i * r.k + j] * scale[group_key(g, i, j, r.n, r.k)], f));
  return r;
}

std::vector<uint8_t> bytes_of(const Fp8Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data.data_ptr());
  return std::vector<uint8_t>(p, p + t.data.numel());
}

std::vector<float> floats_of(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// Bitwise equality of f32 vectors (a NaN equals any NaN); reports the first difference.
::testing::AssertionResult same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
    if (!both_nan && bits(a[i]) != bits(b[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_bytes(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return ::testing::AssertionFailure() << "byte " << i << ": " << int(a[i]) << " vs " << int(b[i]);
  return ::testing::AssertionSuccess();
}

// Random x whose magnitudes vary by row and by column (2^-8 .. 2^8), so that the groups' scales differ, with
// a few exact zeros.
Tensor varied_input(Rng& rng, int64_t rows, int64_t cols, DType dt) {
  std::vector<double> rs(rows), cs(cols), v(static_cast<size_t>(rows * cols));
  for (double& e : rs) e = std::ldexp(1.0, static_cast<int>(rng.integer(-8, 8)));
  for (double& e : cs) e = std::ldexp(1.0, static_cast<int>(rng.integer(-4, 4)));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v[r * cols + c] = rng.integer(0, 40) == 0 ? 0.0 : rng.uniform(-1, 1) * rs[r] * cs[c];
  return tensor_of(v, {rows, cols}, dt);
}

// x's values as the kernels see them: rounded to f32.
std::vector<float> as_f32(const Tensor& x) {
  std::vector<float> out;
  for (double v : host(x)) out.push_back(static_cast<float>(v));
  return out;
}

const std::pair<int64_t, int64_t> kQuantSizes[] = {{1, 1},     {31, 33},   {33, 31},   {127, 129},
                                                   {128, 256}, {129, 128}, {256, 384}, {300, 260}};

void expect_matches_naive(const Tensor& x, const Fp8Tensor* out, const Fp8Tensor* out_t, const float* given) {
  const std::vector<float> xf = as_f32(x);
  const int64_t rows = x.size(0), cols = x.size(1);
  for (const Fp8Tensor* o : {out, out_t}) {
    if (o == nullptr) continue;
    const bool transposed = o == out_t;
    SCOPED_TRACE(transposed ? "out_t" : "out");
    const Naive ref = naive_quantize(xf, rows, cols, transposed, o->granularity, o->format, given);
    EXPECT_TRUE(same_bytes(bytes_of(*o), ref.q));
    EXPECT_TRUE(same_floats(floats_of(o->scale_inv), ref.scale_inv));
  }
}

TEST(Quantize, MatchesNaiveEveryGranularity) {
  Rng rng;
  for (DType dt : float_types()) {
    for (auto [rows, cols] : kQuantSizes) {
      const Tensor x = varied_input(rng, rows, cols, dt);
      for (Fp8Granularity g : kGrans) {
        for (Fp8Format f : kFormats) {
          for (int which = 0; which < 3; ++which) {  // out, out_t, both
            SCOPED_TRACE(fmt::format("{} [{}, {}] {} {} {}", dtype_name(dt), rows, cols,
                                     ops::fp8_granularity_name(g), ops::fp8_format_name(f),
                                     which == 0   ? "out"
                                     : which == 1 ? "out_t"
                                                  : "both"));
            Fp8Tensor out = Fp8Tensor::empty(rows, cols, f, g, Stream::cpu());
            // The transposed one in the other format when both are requested.
            const Fp8Format ft =
                which == 2 ? (f == Fp8Format::kE4M3 ? Fp8Format::kE5M2 : Fp8Format::kE4M3) : f;
            Fp8Tensor out_t = Fp8Tensor::empty(cols, rows, ft, g, Stream::cpu());
            Fp8Tensor* po = which != 1 ? &out : nullptr;
            Fp8Tensor* pt = which != 0 ? &out_t : nullptr;
            ops::quantize(x, po, pt, QuantizeArgs{}, Stream::cpu());
            expect_matches_naive(x, po, pt, nullptr);
          }
        }
      }
    }
  }
}

// Mixed granularities in one call: the forward operand and its transpose, a weight's blocks.
TEST(Quantize, MixedGranularitiesInOneCall) {
  Rng rng;
  const std::pair<Fp8Granularity, Fp8Granularity> mixes[] = {
      {Fp8Granularity::kBlock1x128, Fp8Granularity::kBlock128x128},
      {Fp8Granularity::kBlock128x128, Fp8Granularity::kBlock1x128},
      {Fp8Granularity::kRowwise, Fp8Granularity::kBlock1x128},
      {Fp8Granularity::kTensorwise, Fp8Granularity::kRowwise},
      {Fp8Granularity::kBlock1x128, Fp8Granularity::kTensorwise}};
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{127, 129}, {256, 384}}) {
    const Tensor x = varied_input(rng, rows, cols, DType::kF32);
    for (auto [g, gt] : mixes) {
      SCOPED_TRACE(fmt::format("[{}, {}] out {} out_t {}", rows, cols, ops::fp8_granularity_name(g),
                               ops::fp8_granularity_name(gt)));
      Fp8Tensor out = Fp8Tensor::empty(rows, cols, Fp8Format::kE4M3, g, Stream::cpu());
      Fp8Tensor out_t = Fp8Tensor::empty(cols, rows, Fp8Format::kE4M3, gt, Stream::cpu());
      ops::quantize(x, &out, &out_t, QuantizeArgs{}, Stream::cpu());
      expect_matches_naive(x, &out, &out_t, nullptr);
    }
  }
}

// |dequantize(quantize(x)) - x| is at most half an FP8 step: relative 2^-(mantissa bits + 1) for normals,
// half the smallest subnormal (times scale_inv) below; the f32 products add a few 2^-24.
TEST(Quantize, DequantizeWithinHalfUlp) {
  Rng rng;
  for (DType dt : float_types()) {
    for (auto [rows, cols] : kQuantSizes) {
      const Tensor x = varied_input(rng, rows, cols, dt);
      const std::vector<float> xf = as_f32(x);
      for (Fp8Granularity g : kGrans) {
        for (Fp8Format f : kFormats) {
          SCOPED_TRACE(fmt::format("{} [{}, {}] {} {}", dtype_name(dt), rows, cols,
                                   ops::fp8_granularity_name(g), ops::fp8_format_name(f)));
          Fp8Tensor out = Fp8Tensor::empty(rows, cols, f, g, Stream::cpu());
          Fp8Tensor out_t = Fp8Tensor::empty(cols, rows, f, g, Stream::cpu());
          ops::quantize(x, &out, &out_t, QuantizeArgs{}, Stream::cpu());
          for (const Fp8Tensor* o : {&out, &out_t}) {
            const bool transposed = o == &out_t;
            Tensor deq = filled(o->data.shape(), DType::kF32, std::nan(""));
            ops::dequantize(*o, deq, Stream::cpu());
            const float* d = deq.data<float>();
            const float* inv = o->scale_inv.data<float>();
            const double rel = std::ldexp(1.0, -(mant_bits(f) + 1));
            int bad = 0;
            for (int64_t i = 0; i < o->rows(); ++i)
              for (int64_t j = 0; j < o->cols(); ++j) {
                const float v = transposed ? xf[j * cols + i] : xf[i * cols + j];
                const double sub = std::ldexp(1.0, min_exp(f) - mant_bits(f) - 1) *
                                   inv[group_key(g, i, j, o->rows(), o->cols())];
                const double tol = rel * std::fabs(v) * (1 + 1e-6) + sub * (1 + 1e-6) + 1e-7 * std::fabs(v);
                if (!(std::fabs(d[i * o->cols() + j] - v) <= tol) && bad++ < 5)
                  ADD_FAILURE() << (transposed ? "out_t" : "out") << " (" << i << ", " << j << "): x " << v
                                << " dequantised " << d[i * o->cols() + j] << " tol " << tol;
              }
            EXPECT_EQ(bad, 0);
          }
        }
      }
    }
  }
}

// Each group's largest |x| is cast to exactly +-fp8_max: the scale maps it onto the largest finite value.
TEST(Quantize, GroupMaxLandsOnFp8Max) {
  Rng rng;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{31, 33}, {127, 129}, {256, 384}}) {
    const Tensor x = varied_input(rng, rows, cols, DType::kF32);
    const std::vector<float> xf = as_f32(x);
    for (Fp8Granularity g : kGrans) {
      for (Fp8Format f : kFormats) {
        SCOPED_TRACE(
            fmt::format("[{}, {}] {} {}", rows, cols, ops::fp8_granularity_name(g), ops::fp8_format_name(f)));
        Fp8Tensor out = Fp8Tensor::empty(rows, cols, f, g, Stream::cpu());
        Fp8Tensor out_t = Fp8Tensor::empty(cols, rows, f, g, Stream::cpu());
        ops::quantize(x, &out, &out_t, QuantizeArgs{}, Stream::cpu());
        for (const Fp8Tensor* o : {&out, &out_t}) {
          const bool transposed = o == &out_t;
          const int64_t n = o->rows(), k = o->cols();
          std::map<int64_t, std::pair<float, int64_t>> argmax;  // group -> (max |y|, flat index)
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < k; ++j) {
              const float a = std::fabs(transposed ? xf[j * cols + i] : xf[i * cols + j]);
              auto& m = argmax.try_emplace(group_key(g, i, j, n, k), 0.f, -1).first->second;
              if (a > m.first) m = {a, i * k + j};
            }
          const auto* q = static_cast<const uint8_t*>(o->data.data_ptr());
          for (const auto& [group, m] : argmax) {
            if (m.second < 0) continue;  // an all-zero group
            EXPECT_EQ(q[m.second] & 0x7f, max_byte(f)) << "group " << group << " max " << m.first;
          }
        }
      }
    }
  }
}

// A weight quantised in 128x128 blocks both ways: out_t is out transposed, bytes and scales.
TEST(Quantize, Block128x128TransposeIsExactTranspose) {
  Rng rng;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{127, 129}, {256, 384}, {300, 260}}) {
    const Tensor x = varied_input(rng, rows, cols, DType::kF64);
    Fp8Tensor out =
        Fp8Tensor::empty(rows, cols, Fp8Format::kE4M3, Fp8Granularity::kBlock128x128, Stream::cpu());
    Fp8Tensor out_t =
        Fp8Tensor::empty(cols, rows, Fp8Format::kE4M3, Fp8Granularity::kBlock128x128, Stream::cpu());
    ops::quantize(x, &out, &out_t, QuantizeArgs{}, Stream::cpu());
    const auto q = bytes_of(out), qt = bytes_of(out_t);
    int bad = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) bad += q[r * cols + c] != qt[c * rows + r];
    EXPECT_EQ(bad, 0);
    const int64_t nrb = (rows + 127) / 128, ncb = (cols + 127) / 128;
    const float* s = out.scale_inv.data<float>();
    const float* st = out_t.scale_inv.data<float>();
    for (int64_t i = 0; i < nrb; ++i)
      for (int64_t j = 0; j < ncb; ++j) EXPECT_EQ(bits(s[i * ncb + j]), bits(st[j * nrb + i]));
  }
}

TEST(Quantize, GivenTensorwiseScale) {
  Rng rng;
  for (DType dt : float_types()) {
    const Tensor x = varied_input(rng, 127, 129, dt);
    const float scale = static_cast<float>(rng.uniform(0.5, 3.0));
    Tensor st = tensor_of({scale}, {1}, DType::kF32);
    QuantizeArgs args;
    args.scale = &st;
    Fp8Tensor out = Fp8Tensor::empty(127, 129, Fp8Format::kE4M3, Fp8Granularity::kTensorwise, Stream::cpu());
    Fp8Tensor out_t =
        Fp8Tensor::empty(129, 127, Fp8Format::kE5M2, Fp8Granularity::kTensorwise, Stream::cpu());
    ops::quantize(x, &out, &out_t, args, Stream::cpu());
    expect_matches_naive(x, &out, &out_t, &scale);
    // One shared multiplier whatever the formats: scale_inv = 1 / scale in f32.
    EXPECT_EQ(out.scale_inv.data<float>()[0], 1.0f / scale);
    EXPECT_EQ(out_t.scale_inv.data<float>()[0], 1.0f / scale);
  }
}

TEST(Quantize, AmaxOutAccumulates) {
  Rng rng;
  for (DType dt : float_types()) {
    const Tensor x = varied_input(rng, 129, 127, dt);
    float want = 0.f;
    for (float v : as_f32(x)) want = std::max(want, std::fabs(v));
    for (Fp8Granularity g : kGrans) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dt), ops::fp8_granularity_name(g)));
      Fp8Tensor out = Fp8Tensor::empty(129, 127, Fp8Format::kE4M3, g, Stream::cpu());
      Fp8Tensor out_t = Fp8Tensor::empty(127, 129, Fp8Format::kE5M2, g, Stream::cpu());
      Tensor acc = tensor_of({0.0}, {1}, DType::kF32);
      QuantizeArgs args;
      args.amax_out = &acc;
      ops::quantize(x, &out, nullptr, args, Stream::cpu());
      EXPECT_EQ(acc.data<float>()[0], want);
      acc.data<float>()[0] = 2 * want;  // a larger history stays
      ops::quantize(x, nullptr, &out_t, args, Stream::cpu());
      EXPECT_EQ(acc.data<float>()[0], 2 * want);
      acc.data<float>()[0] = want / 2;  // a smaller one is raised
      ops::quantize(x, &out, &out_t, args, Stream::cpu());
      EXPECT_EQ(acc.data<float>()[0], want);
      acc.data<float>()[0] = kNaNf;  // NaN stays NaN
      ops::quantize(x, &out, nullptr, args, Stream::cpu());
      EXPECT_TRUE(std::isnan(acc.data<float>()[0]));
    }
  }
}

// NaN in x: amax_out becomes NaN; every group holding it (and the whole tensor, tensorwise) gets scale 1 and
// the NaN element the NaN byte, while the other groups are untouched.
TEST(Quantize, NaNReachesAmaxOut) {
  Rng rng;
  for (DType dt : float_types()) {
    std::vector<double> v = host(varied_input(rng, 130, 140, dt));
    v[5 * 140 + 7] = std::nan("");
    const Tensor x = tensor_of(v, {130, 140}, dt);
    for (Fp8Granularity g : kGrans) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dt), ops::fp8_granularity_name(g)));
      Fp8Tensor out = Fp8Tensor::empty(130, 140, Fp8Format::kE4M3, g, Stream::cpu());
      Fp8Tensor out_t = Fp8Tensor::empty(140, 130, Fp8Format::kE4M3, g, Stream::cpu());
      Tensor acc = tensor_of({1.0}, {1}, DType::kF32);
      QuantizeArgs args;
      args.amax_out = &acc;
      ops::quantize(x, &out, &out_t, args, Stream::cpu());
      EXPECT_TRUE(std::isnan(acc.data<float>()[0]));
      EXPECT_EQ(bytes_of(out)[5 * 140 + 7], 0x7f);
      EXPECT_EQ(bytes_of(out_t)[7 * 130 + 5], 0x7f);
      EXPECT_EQ(out.scale_inv.data<float>()[group_key(g, 5, 7, 130, 140)], 1.0f);
      EXPECT_EQ(out_t.scale_inv.data<float>()[group_key(g, 7, 5, 140, 130)], 1.0f);
      expect_matches_naive(x, &out, &out_t, nullptr);
    }
  }
}

TEST(Quantize, ZeroGroupsGetScaleOne) {
  Rng rng;
  std::vector<double> v = host(varied_input(rng, 200, 300, DType::kF32));
  for (int64_t c = 0; c < 300; ++c) v[3 * 300 + c] = 0.0;    // row 3
  for (int64_t r = 0; r < 200; ++r) v[r * 300 + 290] = 0.0;  // column 290
  for (int64_t r = 128; r < 200; ++r)                        // block (1, 1)
    for (int64_t c = 128; c < 256; ++c) v[r * 300 + c] = 0.0;
  const Tensor x = tensor_of(v, {200, 300}, DType::kF32);
  struct Case {
    Fp8Granularity g;
    bool transposed;
    int64_t group;
  };
  const Case cases[] = {{Fp8Granularity::kRowwise, false, 3},
                        {Fp8Granularity::kBlock1x128, false, 0 * 200 + 3},
                        {Fp8Granularity::kBlock1x128, false, 2 * 200 + 3},
                        {Fp8Granularity::kBlock128x128, false, 1 * 3 + 1},
                        {Fp8Granularity::kRowwise, true, 290},
                        {Fp8Granularity::kBlock1x128, true, 0 * 300 + 290},
                        {Fp8Granularity::kBlock1x128, true, 1 * 300 + 200},
                        {Fp8Granularity::kBlock128x128, true, 1 * 2 + 1}};
  for (const Case& cs : cases) {
    SCOPED_TRACE(fmt::format("{} {} group {}", ops::fp8_granularity_name(cs.g),
                             cs.transposed ? "out_t" : "out", cs.group));
    Fp8Tensor o = cs.transposed ? Fp8Tensor::empty(300, 200, Fp8Format::kE4M3, cs.g, Stream::cpu())
                                : Fp8Tensor::empty(200, 300, Fp8Format::kE4M3, cs.g, Stream::cpu());
    ops::quantize(x, cs.transposed ? nullptr : &o, cs.transposed ? &o : nullptr, QuantizeArgs{},
                  Stream::cpu());
    EXPECT_EQ(o.scale_inv.data<float>()[cs.group], 1.0f);
    expect_matches_naive(x, cs.transposed ? nullptr : &o, cs.transposed ? &o : nullptr, nullptr);
  }
  // An all-zero tensor: scale 1, zero bytes.
  const Tensor z = filled({31, 33}, DType::kF64, 0.0);
  Fp8Tensor o = Fp8Tensor::empty(31, 33, Fp8Format::kE5M2, Fp8Granularity::kTensorwise, Stream::cpu());
  ops::quantize(z, &o, nullptr, QuantizeArgs{}, Stream::cpu());
  EXPECT_EQ(o.scale_inv.data<float>()[0], 1.0f);
  for (uint8_t b : bytes_of(o)) EXPECT_EQ(b, 0);
}

// A group whose amax is so small that fp8_max / amax overflows f32 (here f32 subnormals) takes scale FLT_MAX:
// finite scales and no NaN bytes, unlike an infinite scale (0 * inf = NaN).
TEST(Quantize, TinyAmaxClampsScale) {
  EXPECT_EQ(ops::cpu::fp8_scale_from_amax(1e-40f, Fp8Format::kE4M3), std::numeric_limits<float>::max());
  EXPECT_EQ(ops::cpu::fp8_scale_from_amax(0.0f, Fp8Format::kE4M3), 1.0f);
  EXPECT_EQ(ops::cpu::fp8_scale_from_amax(kInf, Fp8Format::kE4M3), 1.0f);
  EXPECT_EQ(ops::cpu::fp8_scale_from_amax(kNaNf, Fp8Format::kE5M2), 1.0f);
  EXPECT_EQ(ops::cpu::fp8_scale_from_amax(2.0f, Fp8Format::kE5M2), 28672.0f);
  std::vector<double> v(4 * 130);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 3 == 0 ? 0.0 : 1e-40) * (i % 2 ? 1 : -1);
  const Tensor x = tensor_of(v, {4, 130}, DType::kF32);
  for (Fp8Granularity g : kGrans) {
    Fp8Tensor o = Fp8Tensor::empty(4, 130, Fp8Format::kE4M3, g, Stream::cpu());
    ops::quantize(x, &o, nullptr, QuantizeArgs{}, Stream::cpu());
    for (uint8_t b : bytes_of(o)) EXPECT_NE(b & 0x7f, 0x7f) << ops::fp8_granularity_name(g);
    for (float s : floats_of(o.scale_inv)) EXPECT_TRUE(std::isfinite(s)) << ops::fp8_granularity_name(g);
    expect_matches_naive(x, &o, nullptr, nullptr);
  }
}

// f64 inputs are rounded to f32 before the multiply, as the GPU sees f32: an f64 value just above an FP8
// midpoint that rounds onto the midpoint in f32 then ties to even.
TEST(Quantize, F64InputsRoundToF32First) {
  const double mid = 1.0 + 1.0 / 16;                          // E4M3 midpoint between 1 and 1.125
  const double above = mid + std::ldexp(1.0, -40);            // rounds to `mid` in f32
  Tensor x = tensor_of({above, 448.0}, {1, 2}, DType::kF64);  // amax 448: scale exactly 1
  Fp8Tensor o = Fp8Tensor::empty(1, 2, Fp8Format::kE4M3, Fp8Granularity::kRowwise, Stream::cpu());
  ops::quantize(x, &o, nullptr, QuantizeArgs{}, Stream::cpu());
  EXPECT_EQ(o.scale_inv.data<float>()[0], 1.0f);
  EXPECT_EQ(bytes_of(o)[0], 0x38);  // 1.0 (even), not 1.125
}

TEST(Quantize, ThreadCountInvariant) {
  Rng rng;
  const Tensor x = varied_input(rng, 700, 260, DType::kF32);
  expect_thread_count_invariant([&] {
    std::vector<double> all;
    for (Fp8Granularity g : kGrans) {
      Fp8Tensor out = Fp8Tensor::empty(700, 260, Fp8Format::kE4M3, g, Stream::cpu());
      Fp8Tensor out_t = Fp8Tensor::empty(260, 700, Fp8Format::kE5M2, g, Stream::cpu());
      Tensor acc = tensor_of({0.0}, {1}, DType::kF32);
      QuantizeArgs args;
      args.amax_out = &acc;
      ops::quantize(x, &out, &out_t, args, Stream::cpu());
      for (const Fp8Tensor* o : {&out, &out_t}) {
        for (uint8_t b : bytes_of(*o)) all.push_back(b);
        for (float s : floats_of(o->scale_inv)) all.push_back(s);
      }
      all.push_back(acc.data<float>()[0]);
    }
    return all;
  });
}

TEST(Quantize, RejectsBadArguments) {
  const char* what = "fc1.input_fp8";
  const Stream cpu = Stream::cpu();
  const Tensor x = filled({31, 33}, DType::kF32, 1.0);
  auto make = [&](int64_t r, int64_t c, Fp8Granularity g = Fp8Granularity::kBlock1x128) {
    return Fp8Tensor::empty(r, c, Fp8Format::kE4M3, g, cpu);
  };
  Fp8Tensor good = make(31, 33), good_t = make(33, 31);
  const QuantizeArgs none;
  auto expect = [&](auto&& call, const std::string& name) {
    SCOPED_TRACE(name);
    EXPECT_PRIMUS_ERROR(call(), what);
    EXPECT_PRIMUS_ERROR(call(), name);
  };
  // x: 1-D, 3-D, integer, bf16 (a CUDA-only input), empty.
  expect([&] { ops::quantize(filled({31}, DType::kF32, 1.0), &good, nullptr, none, cpu, what); },
         "x must be 2-D");
  expect([&] { ops::quantize(filled({2, 31, 33}, DType::kF32, 1.0), &good, nullptr, none, cpu, what); }, "x");
  expect(
      [&] {
        ops::quantize(Tensor::zeros({31, 33}, DType::kI32), &good, nullptr, none, cpu, what);
      },
      "x must be f32 or f64");
  expect(
      [&] {
        ops::quantize(filled({31, 33}, DType::kBF16, 1.0), &good, nullptr, none, cpu, what);
      },
      "x must be f32 or f64");
  expect([&] { ops::quantize(x, nullptr, nullptr, none, cpu, what); }, "neither out nor out_t");
  // Outputs of the wrong shape, dtype, format or scale layout.
  Fp8Tensor wide = make(31, 34);
  expect([&] { ops::quantize(x, &wide, nullptr, none, cpu, what); }, "out.data must be fp8e4m3[31, 33]");
  expect([&] { ops::quantize(x, nullptr, &good, none, cpu, what); }, "out_t.data must be fp8e4m3[33, 31]");
  expect([&] { ops::quantize(x, &good_t, nullptr, none, cpu, what); }, "out.data");
  Fp8Tensor wrong_fmt = make(31, 33);
  wrong_fmt.format = Fp8Format::kE5M2;  // the bytes were allocated as e4m3
  expect([&] { ops::quantize(x, &wrong_fmt, nullptr, none, cpu, what); }, "out.data must be fp8e5m2");
  Fp8Tensor wrong_gran = make(31, 33);
  wrong_gran.granularity = Fp8Granularity::kBlock128x128;  // scale_inv is [1, 31], not [1, 1]
  expect([&] { ops::quantize(x, &wrong_gran, nullptr, none, cpu, what); }, "out.scale_inv must be f32[1, 1]");
  Fp8Tensor f64_scales = make(31, 33);
  f64_scales.scale_inv = Tensor::zeros({1, 31}, DType::kF64);
  expect([&] { ops::quantize(x, &f64_scales, nullptr, none, cpu, what); }, "out.scale_inv");
  Fp8Tensor undefined;
  expect([&] { ops::quantize(x, &undefined, nullptr, none, cpu, what); }, "out.data is undefined");
  // args.scale: only for tensorwise outputs, f32 [1].
  Tensor scale = tensor_of({2.0}, {1}, DType::kF32);
  QuantizeArgs with_scale;
  with_scale.scale = &scale;
  expect([&] { ops::quantize(x, &good, nullptr, with_scale, cpu, what); }, "args.scale");
  Fp8Tensor tw = make(31, 33, Fp8Granularity::kTensorwise);
  Tensor scale2 = tensor_of({2.0, 3.0}, {2}, DType::kF32);
  with_scale.scale = &scale2;
  expect([&] { ops::quantize(x, &tw, nullptr, with_scale, cpu, what); }, "args.scale must be f32[1]");
  // args.amax_out: f32 [1].
  Tensor acc64 = tensor_of({0.0}, {1}, DType::kF64);
  QuantizeArgs with_acc;
  with_acc.amax_out = &acc64;
  expect([&] { ops::quantize(x, &good, nullptr, with_acc, cpu, what); }, "args.amax_out must be f32[1]");
  // Outputs overlapping x or each other.
  Tensor big = Tensor::zeros({31 * 33}, DType::kF32);
  Tensor xv = big.view({31, 33});
  Fp8Tensor alias = make(31, 33);
  alias.data = Tensor::from_blob(big.data_ptr(), {31, 33}, DType::kFP8E4M3, Device::cpu());
  expect([&] { ops::quantize(xv, &alias, nullptr, none, cpu, what); }, "out.data overlaps the input x");
  Fp8Tensor shared = make(33, 31);
  shared.data = Tensor::from_blob(good.data.data_ptr(), {33, 31}, DType::kFP8E4M3, Device::cpu());
  expect([&] { ops::quantize(x, &good, &shared, none, cpu, what); }, "out_t.data overlaps out.data");
  // The default name is the op's.
  EXPECT_PRIMUS_ERROR(ops::quantize(x, &wide, nullptr, none, cpu), "quantize: out.data");
}

TEST(Dequantize, ExactProductAndChecks) {
  Rng rng;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{31, 33}, {129, 300}}) {
    for (Fp8Granularity g : kGrans) {
      for (Fp8Format f : kFormats) {
        Fp8Tensor t = Fp8Tensor::empty(rows, cols, f, g, Stream::cpu());
        auto* q = static_cast<uint8_t*>(t.data.data_ptr());
        for (int64_t i = 0; i < t.data.numel(); ++i) q[i] = static_cast<uint8_t>(rng.integer(0, 255));
        float* inv = t.scale_inv.data<float>();
        for (int64_t i = 0; i < t.scale_inv.numel(); ++i) inv[i] = static_cast<float>(rng.uniform(1e-3, 10));
        Tensor x = filled({rows, cols}, DType::kF32, 0.0);
        ops::dequantize(t, x, Stream::cpu());
        std::vector<float> want;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            want.push_back(ops::fp8_to_float(q[r * cols + c], f) * inv[group_key(g, r, c, rows, cols)]);
        EXPECT_TRUE(same_floats(floats_of(x), want)) << t.describe();
      }
    }
  }
  Fp8Tensor t = Fp8Tensor::empty(4, 5, Fp8Format::kE4M3, Fp8Granularity::kRowwise, Stream::cpu());
  Tensor wrong = Tensor::empty({5, 4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::dequantize(t, wrong, Stream::cpu()), "dequantize: x must be f32[4, 5]");
  Tensor f64 = Tensor::empty({4, 5}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::dequantize(t, f64, Stream::cpu()), "dequantize: x must be f32[4, 5]");
  t.scale_inv = Tensor::empty({5}, DType::kF32);
  Tensor x = Tensor::empty({4, 5}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::dequantize(t, x, Stream::cpu()), "dequantize: t.scale_inv must be f32[4]");
}

TEST(Amax, MaxAbsAndNaN) {
  Rng rng;
  for (DType dt : float_types()) {
    for (int64_t n : {1, 33, 100000}) {
      std::vector<double> v(n);
      for (double& e : v) e = rng.uniform(-3, 3);
      v[rng.integer(0, n - 1)] = -7.25;
      Tensor amax = tensor_of({123.0}, {1}, DType::kF32);  // overwritten
      ops::amax(tensor_of(v, {n}, dt), amax, Stream::cpu());
      EXPECT_EQ(amax.data<float>()[0], 7.25f) << dtype_name(dt) << " n=" << n;
      v[rng.integer(0, n - 1)] = std::nan("");
      ops::amax(tensor_of(v, {n}, dt), amax, Stream::cpu());
      EXPECT_TRUE(std::isnan(amax.data<float>()[0])) << dtype_name(dt) << " n=" << n;
    }
  }
  // 2-D works too; f64 values are rounded to f32 first.
  Tensor amax = Tensor::empty({1}, DType::kF32);
  ops::amax(tensor_of({0.1, -1.0 / 3}, {1, 2}, DType::kF64), amax, Stream::cpu());
  EXPECT_EQ(amax.data<float>()[0], static_cast<float>(1.0 / 3));
  Tensor wrong = Tensor::empty({2}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::amax(filled({3}, DType::kF32, 1.0), wrong, Stream::cpu()),
                      "amax: amax must be f32[1]");
  EXPECT_PRIMUS_ERROR(ops::amax(Tensor::zeros({3}, DType::kI32), amax, Stream::cpu()),
                      "amax: x must be f32 or f64");
}

}  // namespace
}  // namespace primus::test
