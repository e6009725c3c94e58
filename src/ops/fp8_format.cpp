// The FP8 formats on the host: names, the scalar conversions every kernel is checked against, scale shapes
// and Fp8Tensor's helpers (ops/fp8.h).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/fp8.h"

namespace primus::ops {

namespace {

struct FormatBits {
  int mant_bits;  // stored mantissa bits
  int bias;
  int min_exp;  // exponent of the smallest normal: 1 - bias
};

FormatBits bits_of(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? FormatBits{3, 7, -6} : FormatBits{2, 15, -14};
}

}  // namespace

const char* fp8_format_name(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2";
}

const char* fp8_granularity_name(Fp8Granularity g) {
  switch (g) {
    case Fp8Granularity::kTensorwise:
      return "tensorwise";
    case Fp8Granularity::kRowwise:
      return "rowwise";
    case Fp8Granularity::kBlock1x128:
      return "1x128";
    case Fp8Granularity::kBlock128x128:
      return "128x128";
  }
  return "?";
}

// Round to nearest even on the format's grid, computed in f64 where every step is exact: |x| / quantum is a
// power-of-two scaling and rint rounds ties to even. Values past the largest finite one (infinities
// included) saturate to it, as cvt.rn.satfinite does; NaN becomes the canonical 0x7f.
uint8_t float_to_fp8_reference(float x, Fp8Format f) {
  if (std::isnan(x)) return 0x7f;
  const FormatBits b = bits_of(f);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double mag = std::fabs(static_cast<double>(x));
  const double maxv = fp8_max(f);
  if (mag >= maxv) {
    const uint8_t max_bits = f == Fp8Format::kE4M3 ? 0x7e : 0x7b;  // S.1111.110 / S.11110.11
    return sign | max_bits;
  }
  if (mag == 0.0) return sign;
  int e = std::ilogb(mag);  // mag = m * 2^e with m in [1, 2)
  if (e < b.min_exp) e = b.min_exp;
  const double quantum = std::ldexp(1.0, e - b.mant_bits);
  const double q = std::rint(mag / quantum) * quantum;  // may round up to 2^(e+1): still on the grid
  if (q == 0.0) return sign;
  if (q >= maxv) return sign | (f == Fp8Format::kE4M3 ? 0x7e : 0x7b);
  int qe = std::ilogb(q);
  if (qe < b.min_exp) {  // subnormal: exponent field 0, mantissa q / 2^(min_exp - mant_bits)
    const int mant = static_cast<int>(std::ldexp(q, b.mant_bits - b.min_exp));
    return sign | static_cast<uint8_t>(mant);
  }
  const int mant = static_cast<int>(std::ldexp(q, b.mant_bits - qe)) - (1 << b.mant_bits);
  return sign | static_cast<uint8_t>(((qe + b.bias) << b.mant_bits) | mant);
}

float fp8_to_float(uint8_t bits, Fp8Format f) {
  const FormatBits b = bits_of(f);
  const bool neg = bits & 0x80;
  const int exp_bits = 7 - b.mant_bits;
  const int exp = (bits >> b.mant_bits) & ((1 << exp_bits) - 1);
  const int mant = bits & ((1 << b.mant_bits) - 1);
  float v;
  if (f == Fp8Format::kE4M3 && exp == 0xf && mant == 0x7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (f == Fp8Format::kE5M2 && exp == 0x1f) {
    v = mant == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), b.min_exp - b.mant_bits);
  } else {
    v = std::ldexp(static_cast<float>((1 << b.mant_bits) + mant), exp - b.bias - b.mant_bits);
  }
  return neg ? -v : v;
}

Shape fp8_scale_shape(Fp8Granularity g, int64_t rows, int64_t cols) {
  auto blocks = [](int64_t n) { return (n + 127) / 128; };
  switch (g) {
    case Fp8Granularity::kTensorwise:
      return {1};
    case Fp8Granularity::kRowwise:
      return {rows};
    case Fp8Granularity::kBlock1x128:
      return {blocks(cols), rows};
    case Fp8Granularity::kBlock128x128:
      return {blocks(rows), blocks(cols)};
  }
  return {1};
}

Fp8Tensor Fp8Tensor::empty(int64_t rows, int64_t cols, Fp8Format f, Fp8Granularity g, const Stream& s) {
  PRIMUS_CHECK(rows > 0 && cols > 0, "Fp8Tensor::empty: shape [{}, {}] must be positive", rows, cols);
  Fp8Tensor t;
  t.format = f;
  t.granularity = g;
  t.data = Tensor::empty({rows, cols}, fp8_dtype(f), s);
  t.scale_inv = Tensor::empty(fp8_scale_shape(g, rows, cols), DType::kF32, s);
  return t;
}

std::string Fp8Tensor::describe() const {
  if (!defined()) return "undefined fp8 tensor";
  return fmt::format("{} {} [{}, {}] on {}", fp8_format_name(format), fp8_granularity_name(granularity),
                     rows(), cols(), data.device().str());
}

}  // namespace primus::ops
